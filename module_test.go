package pglock_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// An importer's module graph holds every requirement of this go.mod (module graph pruning
// keeps our requirements, not theirs): few, and none of the test tooling that lives in modules
// of its own (internal/containerdb, internal/cmd/demo, bench, tools).
func TestGoModStaysLeanForImporters(t *testing.T) {
	t.Parallel()
	content, err := os.ReadFile("go.mod")
	require.NoError(t, err)
	var required []string
	inBlock := false
	for _, line := range strings.Split(string(content), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "require ("):
			inBlock = true
		case inBlock && line == ")":
			inBlock = false
		case inBlock && line != "":
			required = append(required, strings.Fields(line)[0])
		case strings.HasPrefix(line, "require "):
			required = append(required, strings.Fields(line)[1])
		}
	}
	require.NotEmpty(t, required)
	require.LessOrEqual(t, len(required), 25, "go.mod's requirements: %v", required)
	for _, module := range required {
		for _, banned := range []string{"docker", "moby", "containerd", "testcontainers", "toxiproxy", "zerolog", "prometheus", "gorilla", "opentelemetry"} {
			require.NotContains(t, module, banned, "%s would enter every importer's module graph", module)
		}
	}
}
