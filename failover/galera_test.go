package failover_test

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

// TestGalera starts a two-node Galera cluster: a raw GET_LOCK of one name
// succeeds on both nodes at once (the lock is local to a node, and every
// node accepts writes), which is why every verb of every adapter is refused
// on each node with ErrUnsupportedDialect before anything runs.
func TestGalera(t *testing.T) {
	topology(t)
	g := testdb.StartGalera(t, 2)
	t.Logf("figure: Galera cluster of 2 nodes on MariaDB %s", g.Version(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, node := range g.Nodes {
		db := openMySQL(t, node.DSN())
		c, err := db.Conn(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close() // each session keeps its lock to the end
		var got sql.NullInt64
		if err := c.QueryRowContext(ctx, "SELECT GET_LOCK('ormlock-galera', 0)").Scan(&got); err != nil {
			t.Fatalf("node %d: GET_LOCK: %v", i+1, err)
		}
		t.Logf("figure: node %d: GET_LOCK('ormlock-galera', 0) = %v (sessions on %d nodes hold it)", i+1, got, i+1)
		if !got.Valid || got.Int64 != 1 {
			t.Errorf("node %d: GET_LOCK = %v, want 1 (on node 2: granted although node 1's session holds it): the reason for the refusal did not show", i+1, got)
		}
	}
	for i, node := range g.Nodes {
		assertAllRefused(t, fmt.Sprintf("node %d", i+1), "Galera", "mysql", openMySQL(t, node.DSN()))
	}
}
