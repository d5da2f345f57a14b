package advisory

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/internal/db"
	"github.com/pglock/pglock/internal/errs"
)

// Key names an advisory lock.
//
// PostgreSQL has two key spaces that never meet: one bigint, and a pair of ints (pg_locks shows
// them with objsubid 1 and 2). Int64Key(5) and PairKey(0, 5) are different locks.
//
// A key made from a string is the first 8 bytes of the SHA-256 of its UTF-8 bytes, read as a
// big-endian signed int64; with a namespace, of namespace + "\x00" + name (a valid name has no
// NUL, so no namespaced key equals a plain one by construction). Any language, and PostgreSQL
// itself, computes the same key:
//
//	SELECT ('x' || substr(encode(sha256(convert_to('order:1', 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint;
//
// Two different names share a key with probability 2⁻⁶⁴; among n names, some two do with
// probability about n²/2⁶⁵: 3·10⁻⁸ for a million names, 3 % for a billion.
type Key struct {
	pair            bool
	id              int64
	ns, minor       int32
	namespace, name string // the strings it came from, if any
	err             error  // why they cannot make a key
}

// StringKey is the key of a name (see Key). The name follows [pglock.ValidateName].
func StringKey(name string) Key { return NamespacedKey("", name) }

// NamespacedKey is the key of name inside namespace (see Key); an empty namespace is none.
func NamespacedKey(namespace, name string) Key {
	k := Key{namespace: namespace, name: name}
	if err := pglock.ValidateName(name); err != nil {
		k.err = err
		return k
	}
	if namespace != "" {
		if err := pglock.ValidateName(namespace); err != nil {
			k.err = errs.Errorf("namespace: %w", err)
			return k
		}
	}
	input := name
	if namespace != "" {
		input = namespace + "\x00" + name
	}
	sum := sha256.Sum256([]byte(input))
	k.id = int64(binary.BigEndian.Uint64(sum[:8]))
	return k
}

// Int64Key is the lock PostgreSQL's one-argument advisory functions take.
func Int64Key(id int64) Key { return Key{id: id} }

// PairKey is the lock PostgreSQL's two-argument advisory functions take.
func PairKey(namespace, id int32) Key { return Key{pair: true, ns: namespace, minor: id} }

// Int64 returns the bigint a string or int64 key stands for, and false for a pair key.
func (k Key) Int64() (int64, bool) { return k.id, !k.pair }

// Pair returns the two ints of a pair key (zero for other keys).
func (k Key) Pair() (namespace, id int32) { return k.ns, k.minor }

// String describes the key for logs and errors.
func (k Key) String() string {
	switch {
	case k.pair:
		return fmt.Sprintf("advisory(%d, %d)", k.ns, k.minor)
	case k.namespace != "":
		return fmt.Sprintf("advisory %q in %q (%d)", k.name, k.namespace, k.id)
	case k.name != "":
		return fmt.Sprintf("advisory %q (%d)", k.name, k.id)
	}
	return fmt.Sprintf("advisory(%d)", k.id)
}

// lockID is what identifies the lock in PostgreSQL, and a held lock in a Session.
type lockID struct {
	pair      bool
	id        int64
	ns, minor int32
	shared    bool
}

func (k Key) lock(shared bool) (lockID, error) {
	if k.err != nil {
		return lockID{}, k.err
	}
	return lockID{pair: k.pair, id: k.id, ns: k.ns, minor: k.minor, shared: shared}, nil
}

func (id lockID) params() db.AdvisoryLockParams {
	return db.AdvisoryLockParams{Pair: id.pair, Shared: id.shared, Ns: id.ns, ID: id.minor, Key: id.id}
}
