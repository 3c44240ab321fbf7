package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// ormlock run --owner names the run to ormlock holder as owner=, one way on
// every server (PostgreSQL: the lock transaction's application_name, not
// printed again as application=; MySQL/MariaDB: the owners row the run
// writes): for one KEY, for the slot of --max-holders it holds, and for a
// --once-per run (holder JOB). Without --owner no owner is shown.
func TestRunOwner(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Parallel() // one server each
		table := ledgerTable(t, k)
		t.Cleanup(func() {
			_, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + table + lockproto.OwnersTableSuffix)
		})
		code, _, stderr := runBin(t, k, "migrate", "--ledger-table", table)
		want(t, code, stderr, 0)
		g, waitFor := gate(t)
		cmd := []string{"--", "sh", "-c", "echo started; " + waitFor}
		holder := func(key string) string {
			t.Helper()
			code, out, stderr := runBin(t, k, "holder", "--ledger-table", table, key)
			want(t, code, stderr, 0)
			if strings.Contains(out, "application=") {
				t.Errorf("holder prints application= beside the owner: %q", out)
			}
			return out
		}

		key, plain, sem, job := uniq(t, "key"), uniq(t, "plain"), uniq(t, "sem"), uniq(t, "job")
		ps := []*proc{
			start(t, k, append([]string{"run", "--ledger-table", table, "--owner", "host a/1", key}, cmd...)...),
			start(t, k, append([]string{"run", "--ledger-table", table, plain}, cmd...)...),
			start(t, k, append([]string{"run", "--ledger-table", table, "--owner", "sem-owner", "--max-holders", "3", sem}, cmd...)...),
			start(t, k, append([]string{"run", "--ledger-table", table, "--owner", "job-owner", "--once-per", "@daily", job}, cmd...)...),
		}
		for _, p := range ps {
			p.waitOutput(t, "started", time.Minute)
		}
		if out := holder(key); !strings.HasPrefix(out, "held pid=") || !strings.Contains(out, ` owner="host a/1" `) {
			t.Errorf("holder of a run with --owner: %q, want owner=\"host a/1\"", out)
		}
		if out := holder(plain); !strings.HasPrefix(out, "held pid=") || strings.Contains(out, "owner=") {
			t.Errorf("holder of a run without --owner: %q, want no owner", out)
		}
		if out := holder(job); !strings.HasPrefix(out, "run=") || !strings.Contains(out, " owner=job-owner ") {
			t.Errorf("holder of a --once-per run with --owner: %q, want run=SLOT held ... owner=job-owner", out)
		}
		hs, err := gormlock.Holders(openGorm(t, k), ormlock.Semaphore(sem, 3), ormlock.WithLedgerTable(table))
		if err != nil || len(hs) != 1 || hs[0].Owner != "sem-owner" || hs[0].Slot == 0 {
			t.Errorf("Holders of the --max-holders run: %+v, %v; want its slot owned by sem-owner", hs, err)
		}
		letGo(t, g)
		for _, p := range ps {
			want(t, p.wait(t, time.Minute), p.stderr.String(), 0)
		}
	})
}
