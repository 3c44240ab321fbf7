package ledger

import (
	"context"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

// TestControlsOnProbes: a pool looks for a ledger's controls table once,
// and again only when it was found missing more than ReprobeControls ago;
// once found (or made by Migrate: MarkControls) it is not asked again.
func TestControlsOnProbes(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			ctx := context.Background()
			tbl, db := testTable(t, k, "probe")
			c := CtlOf(tbl)
			if c.ControlsOn(ctx, db, db) {
				t.Fatal("controls table found before it exists")
			}
			if err := c.createControls(ctx, db); err != nil {
				t.Fatal(err)
			}
			if c.ControlsOn(ctx, db, db) {
				t.Error("a missing table was looked for again within a minute")
			}
			st := ctlStateOf(db, tbl.name)
			st.checked.Store(time.Now().Add(-ReprobeControls - time.Second).UnixNano())
			if !c.ControlsOn(ctx, db, db) {
				t.Error("the table was not looked for again after a minute")
			}
			// found: never asked again (a closed pool would answer an error)
			closed := testdb.Open(t, k)
			closed.Close()
			if !c.ControlsOn(ctx, db, closed) {
				t.Error("a found table was looked for again")
			}
			other := testdb.Open(t, k)
			MarkControls(other, tbl.name)
			if !c.ControlsOn(ctx, other, closed) {
				t.Error("MarkControls did not record the table")
			}
		})
	}
}
