package migrations

import (
	"bufio"
	"context"
	"embed"
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/pglock/pglock/internal/db"
)

// manifests holds, for each version, what it installs: a line per object (kind, name, and a
// hash of its definition), written by make generate from a database migrated to that version.
//
//go:embed schema/*.txt
var manifests embed.FS

// Difference is one object whose definition is not what the installed version made.
type Difference struct {
	Kind   string // "function", "table", "index", "type" or "sequence"
	Name   string // a function's with its arguments
	Change string // "changed", "missing" or "unexpected" (the version has none of that name)
}

func (d Difference) String() string { return d.Kind + " " + d.Name + " " + d.Change }

// object is one line of a manifest.
type object struct{ kind, name, hash string }

// manifest is what version installs, by kind and name: nothing for version 0.
func manifest(version uint) (map[[2]string]string, error) {
	if version == 0 {
		return map[[2]string]string{}, nil
	}
	text, err := manifests.ReadFile(path.Join("schema", fmt.Sprintf("%06d.txt", version)))
	if err != nil {
		return nil, err
	}
	objects := map[[2]string]string{}
	scanner := bufio.NewScanner(strings.NewReader(string(text)))
	for scanner.Scan() {
		line := scanner.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Split(line, "\t")
		if len(fields) != 3 {
			return nil, fmt.Errorf("schema/%06d.txt: %q is not kind, name and hash", version, line)
		}
		objects[[2]string{fields[0], fields[1]}] = fields[2]
	}
	return objects, scanner.Err()
}

// legacyNames are pglock's objects outside its pglock_ prefix: the seed's, kept for callers of
// the seed's contract. What SchemaObjects looks for besides the prefix (indexes by their tables).
var legacyNames = []string{
	"distributed_locks", "distributed_lock_waiters", "advisory_lock_names", "distributed_locks_fencing_token_seq",
	"distributed_lock_waiters_waiter_seq_seq",
	"acquire_lock", "acquire_lock_ms", "extend_lock", "extend_lock_ms", "release_lock", "force_release_lock",
	"verify_fence", "register_advisory_name", "advisory_locks",
}

// installed reads pglock's objects in schema, in a transaction confined by SearchOnlySchema.
func installed(ctx context.Context, q *db.Queries, schema string) ([]object, error) {
	rows, err := q.SchemaObjects(ctx, db.SchemaObjectsParams{Schema: schema, LegacyNames: legacyNames})
	if err != nil {
		return nil, err
	}
	objects := make([]object, len(rows))
	for i, row := range rows {
		objects[i] = object{row.Kind, row.Name, row.Hash}
	}
	return objects, nil
}

// drift compares what is installed with what version installs.
func drift(version uint, live []object) ([]Difference, error) {
	want, err := manifest(version)
	if err != nil {
		return nil, fmt.Errorf("what version %d installs: %w", version, err)
	}
	differences := []Difference{}
	for _, o := range live {
		key := [2]string{o.kind, o.name}
		hash, ok := want[key]
		switch {
		case !ok:
			differences = append(differences, Difference{o.kind, o.name, "unexpected"})
		case hash != o.hash:
			differences = append(differences, Difference{o.kind, o.name, "changed"})
		}
		delete(want, key)
	}
	for key := range want {
		differences = append(differences, Difference{key[0], key[1], "missing"})
	}
	sort.Slice(differences, func(i, j int) bool {
		a, b := differences[i], differences[j]
		return a.Kind < b.Kind || a.Kind == b.Kind && a.Name < b.Name
	})
	return differences, nil
}
