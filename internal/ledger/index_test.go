package ledger_test

import (
	"strings"
	"testing"

	"github.com/ormlock/ormlock/internal/ledger"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// The prune index's name: the table's with "_ns_slot" while that fits in 63
// bytes, else shortened with a hash of the whole name, distinct for names
// that share their first 46 bytes; MySQL's CREATE TABLE declares it.
func TestIndexName(t *testing.T) {
	name := func(table string) string {
		tbl, err := ledger.NewTable(lockproto.Postgres, table)
		if err != nil {
			t.Fatal(err)
		}
		return tbl.IndexName()
	}
	if got := name("ormlock_runs"); got != "ormlock_runs_ns_slot" {
		t.Errorf("IndexName(ormlock_runs) = %q", got)
	}
	fits := strings.Repeat("a", 55)
	if got := name(fits); got != fits+"_ns_slot" {
		t.Errorf("IndexName of 55 bytes = %q", got)
	}
	long1, long2 := strings.Repeat("b", 62)+"1", strings.Repeat("b", 62)+"2"
	n1, n2 := name(long1), name(long2)
	if len(n1) != 63 || len(n2) != 63 || n1 == n2 || !strings.HasPrefix(n1, strings.Repeat("b", 46)+"_") || !strings.HasSuffix(n1, "_ns_slot") {
		t.Errorf("IndexName of 63-byte names: %q, %q", n1, n2)
	}
	if got := name(strings.Repeat("c", 56)); len(got) != 63 || !strings.HasPrefix(got, strings.Repeat("c", 46)+"_") {
		t.Errorf("IndexName of 56 bytes = %q", got)
	}
	my, _ := ledger.NewTable(lockproto.MySQL, "Runs_1")
	if !strings.Contains(my.CreateSQL(), "KEY `Runs_1_ns_slot` (namespace, slot)") {
		t.Errorf("mysql: %s", my.CreateSQL())
	}
}
