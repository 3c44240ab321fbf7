package main_test

import (
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

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

// leaseTables returns the flags of a ledger table and a lease table of the
// test's own (dropped at cleanup), created by ormlock migrate.
func leaseTables(t *testing.T, k testdb.Kind) []string {
	t.Helper()
	ledger := ledgerTable(t, k)
	leases := ledger + "_leases"
	t.Cleanup(func() { _, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS " + leases) })
	tables := []string{"--ledger-table", ledger, "--lease-table", leases}
	code, _, stderr := runBin(t, k, append([]string{"migrate"}, tables...)...)
	want(t, code, stderr, 0)
	return tables
}

// ormlock run --lease: COMMAND runs under a lease, not a lock of the
// server (hand-written SQL can take the key's lock meanwhile), with the
// lease's epoch in $ORMLOCK_FENCING_TOKEN; a second run of the key exits 75
// while it runs, also after more than a TTL (the lease is renewed); holder
// shows it; it is released when COMMAND exits. --once-per runs under a
// lease too, once per slot.
func TestRunLease(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Parallel()
		tables := leaseTables(t, k)
		key := uniq(t, "lease")
		g, waitFor := gate(t)
		args := append(append([]string{"run", "--lease", "1s"}, tables...), key, "--", "sh", "-c", "echo started token=$ORMLOCK_FENCING_TOKEN; "+waitFor)
		a := start(t, k, args...)
		a.waitOutput(t, "started", time.Minute)
		m := startedRE.FindStringSubmatch(a.stdout.String())
		if m == nil || m[1] == "0" {
			t.Fatalf("COMMAND's token: %q", a.stdout)
		}
		if !testdb.RawFree(t, k, "", key) {
			t.Errorf("the server's lock of %q is held: a lease holds none", key)
		}
		for range 2 { // the second after more than a TTL: renewed
			code, out, stderr := runBin(t, k, append(append([]string{"run", "--lease", "1s"}, tables...), key, "--", "echo", "ran")...)
			want(t, code, stderr, 75, "not acquired")
			if out != "" {
				t.Errorf("a second run ran COMMAND: %q", out)
			}
			code, out, stderr = runBin(t, k, append(append([]string{"holder"}, tables...), key)...)
			want(t, code, stderr, 0)
			if !strings.HasPrefix(out, "held lease epoch="+m[1]+" ") {
				t.Errorf("holder while the run holds its lease: %q, want epoch %s", out, m[1])
			}
			time.Sleep(1500 * time.Millisecond)
		}
		letGo(t, g)
		want(t, a.wait(t, time.Minute), a.stderr.String(), 0)
		code, out, stderr := runBin(t, k, append(append([]string{"holder", "--lease"}, tables...), key)...)
		want(t, code, stderr, 0)
		if out != "free\n" {
			t.Errorf("holder after the run: %q", out)
		}

		job := uniq(t, "lease-job")
		once := append(append([]string{"run", "--lease", "5s", "--once-per", "@daily"}, tables...), job, "--", "sh", "-c", "echo ran token=$ORMLOCK_FENCING_TOKEN")
		code, out, stderr = runBin(t, k, once...)
		want(t, code, stderr, 0)
		if !strings.HasPrefix(out, "ran token=") || out == "ran token=\n" {
			t.Errorf("--once-per --lease: %q", out)
		}
		code, out, stderr = runBin(t, k, once...)
		want(t, code, stderr, 76, "already done")
		if out != "" {
			t.Errorf("a done slot ran: %q", out)
		}
		testdb.AssertNoLeaks(t, k)
	})
}

// ormlock lead --lease: one of two leads; its ormlock killed with SIGKILL
// (its COMMAND with it), its lease is no longer renewed and the other
// leads once it has expired, with a greater epoch as its token; SIGTERM
// ends that one and releases its lease.
func TestLeadLease(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Parallel()
		tables := leaseTables(t, k)
		key := uniq(t, "lead-lease")
		dirs := [2]string{t.TempDir(), t.TempDir()}
		var ps [2]*proc
		for i, dir := range dirs {
			args := append(append([]string{"lead", "--lease", "1s", "--grace", "500ms", "--owner", fmt.Sprintf("replica-%d", i)}, tables...), key, "--", "sh", "-c", leadScript(dir))
			ps[i] = start(t, k, args...)
		}
		first := waitTerms(t, 1, ps[0], ps[1])
		i := 0
		if first == ps[1] {
			i = 1
		}
		leader, other := ps[i], ps[1-i]
		code, out, stderr := runBin(t, k, append(append([]string{"holder"}, tables...), key)...)
		want(t, code, stderr, 0)
		if w := fmt.Sprintf(" owner=replica-%d ", i); !strings.HasPrefix(out, "held lease epoch=") || !strings.Contains(out, w) {
			t.Errorf("holder %q, want the lease of replica-%d", out, i)
		}
		if n := len(terms(other)); n != 0 {
			t.Fatalf("both lead: %d terms on the other", n)
		}
		if err := leader.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		leader.wait(t, time.Minute)
		waitTerms(t, 1, other)
		if t1, t2 := terms(leader)[0], terms(other)[0]; t1 <= 0 || t2 <= t1 {
			t.Errorf("epochs: first term %d, second %d", t1, t2)
		}
		if err := other.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		want(t, other.wait(t, time.Minute), other.stderr.String(), 128+int(syscall.SIGTERM))
		code, out, stderr = runBin(t, k, append(append([]string{"holder", "--lease"}, tables...), key)...)
		want(t, code, stderr, 0)
		if out != "free\n" {
			t.Errorf("holder after ormlock lead exited: %q", out)
		}
		testdb.AssertNoLeaks(t, k)
	})
}
