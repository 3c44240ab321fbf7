package main_test

import (
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// ormlock migrate --print prints MigrateSQL's statements, each ending with
// ";", for --dialect or the dialect of the DSN, and never connects: the
// DSNs here point at a port nobody listens on.
func TestMigratePrint(t *testing.T) {
	for _, c := range []struct {
		name, dialect string
		args          []string
	}{
		{"postgres", "postgres", []string{"migrate", "--print", "--dialect", "postgres"}},
		{"mysql", "mysql", []string{"migrate", "--print", "--dialect", "mysql"}},
		{"postgres DSN", "postgres", []string{"migrate", "--print", "--dsn", "postgres://u:pw@127.0.0.1:1/db"}},
		{"mysql DSN", "mysql", []string{"migrate", "--print", "--dsn", "u:pw@tcp(127.0.0.1:1)/db"}},
		{"mysql URL", "mysql", []string{"migrate", "--print", "--dsn", "mysql://u:pw@127.0.0.1:1/db"}},
		{"dialect over DSN", "mysql", []string{"migrate", "--print", "--dialect", "mysql", "--dsn", "postgres://u:pw@127.0.0.1:1/db"}},
		{"names", "postgres", []string{"migrate", "--print", "--dialect", "postgres", "--ledger-table", "billing_runs", "--lease-table", "billing_leases"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, stderr := runBin(t, "", c.args...)
			want(t, code, stderr, 0)
			var opts []ormlock.Option
			if c.name == "names" {
				opts = []ormlock.Option{ormlock.WithLedgerTable("billing_runs"), ormlock.WithLeaseTable("billing_leases")}
			}
			stmts, err := ormlock.MigrateSQL(c.dialect, opts...)
			if err != nil {
				t.Fatal(err)
			}
			if wantOut := strings.Join(stmts, ";\n\n") + ";\n\n"; out != wantOut {
				t.Errorf("stdout:\n%s\nwant:\n%s", out, wantOut)
			}
			if stderr != "" {
				t.Errorf("stderr %q", stderr)
			}
		})
	}
}

// ormlock holder shows a key's lease: without --lease when the server's
// lock is free, with --lease always; its epoch, owner, mode and time left,
// no pid. Migrate creates the lease table (--lease-table).
func TestHolderShowsLease(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		ledger := ledgerTable(t, k)
		leases := ledger + "_leases"
		t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + leases) })
		tables := []string{"--ledger-table", ledger, "--lease-table", leases}
		code, out, stderr := runBin(t, k, append([]string{"migrate"}, tables...)...)
		want(t, code, stderr, 0)
		if !strings.Contains(out, leases) {
			t.Errorf("migrate: %q, want the lease table named", out)
		}
		key := uniq(t, "lease")
		write := "INSERT INTO " + leases + ` (namespace, lock_key, reader, epoch, mode, owner, holder, acquired_at, expires_at)
VALUES ('', $1, '', 42, 'exclusive', 'host-a/4242', 'h1', clock_timestamp() - interval '2 seconds', clock_timestamp() + interval '20 seconds')`
		var arg any = "name:" + key
		if k.Dialect() == "mysql" {
			write = "INSERT INTO " + leases + ` (namespace, lock_key, reader, epoch, mode, owner, holder, acquired_at, expires_at)
VALUES ('', ?, '', 42, 'exclusive', 'host-a/4242', 'h1', UTC_TIMESTAMP(6) - INTERVAL 2 SECOND, UTC_TIMESTAMP(6) + INTERVAL 20 SECOND)`
			arg = []byte("name:" + key)
		}
		code, out, stderr = runBin(t, k, append([]string{"holder", key}, tables...)...)
		want(t, code, stderr, 0)
		if out != "free\n" {
			t.Errorf("holder of a free key: %q", out)
		}
		if _, err := testdb.AdminDB(t, k).Exec(write, arg); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"holder", key}, {"holder", "--lease", key}} {
			code, out, stderr = runBin(t, k, append(args, tables...)...)
			want(t, code, stderr, 0)
			if !strings.HasPrefix(out, "held lease epoch=42 owner=host-a/4242 mode=exclusive held_for=") || !strings.Contains(out, " expires_in=") || strings.Contains(out, "pid=") {
				t.Errorf("%q: %q", args, out)
			}
		}
		testdb.AssertNoLeaks(t, k)
	})
}
