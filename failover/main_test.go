package failover_test

import (
	"os"
	"testing"

	"github.com/ormlock/ormlock/internal/testdb"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// topology skips t unless ORMLOCK_TOPOLOGY is set: the topologies take
// seconds each to start, so make test leaves them to make compat.
func topology(t *testing.T) {
	t.Helper()
	if os.Getenv("ORMLOCK_TOPOLOGY") == "" {
		t.Skip("replication topologies run with ORMLOCK_TOPOLOGY=1 (make compat)")
	}
}
