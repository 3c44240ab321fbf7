package lockproto_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
	"github.com/ormlock/ormlock/internal/testdb"
)

// The verdicts are pure functions of the detection queries' answers, so the
// engines that cannot run here (CockroachDB, Galera, Group Replication) are
// judged from the answers they give; a real standby is tested end to end in
// gormlock and entlock.

func TestPostgresVerdict(t *testing.T) {
	for _, c := range []struct {
		version    string
		inRecovery bool
		refused    string // "" when the locks are real
	}{
		{"PostgreSQL 15.14 (Debian 15.14-0+deb12u1) on x86_64-pc-linux-gnu", false, ""},
		{"PostgreSQL 17.10 on x86_64-pc-linux-gnu, compiled by gcc", false, ""},
		{"PostgreSQL 15.14 (Debian 15.14-0+deb12u1) on x86_64-pc-linux-gnu", true, "hot standby"},
		{"CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu, built 2023/09/27 01:53:43, go1.19.10)", false, "CockroachDB v23.1"},
		{"CockroachDB CCL v26.2.0 (x86_64-pc-linux-gnu, built 2026/05/01)", false, "CockroachDB v26.2"},
		{"CockroachDB CCL v26.3.0 (x86_64-pc-linux-gnu, built 2026/08/01)", false, ""},
		{"CockroachDB OSS v27.1.0 (aarch64-unknown-linux-gnu)", false, ""},
		{"CockroachDB CCL v26.3.0 (x86_64-pc-linux-gnu)", true, "hot standby"}, // a reader tenant, say
		{"CockroachDB (no version)", false, "unknown version"},
	} {
		err := lockproto.PostgresVerdict(c.version, c.inRecovery)
		if c.refused == "" {
			if err != nil {
				t.Errorf("%q, in recovery %v: %v; want nil", c.version, c.inRecovery, err)
			}
			continue
		}
		if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), c.refused) || !strings.HasPrefix(err.Error(), "ormlock: ") {
			t.Errorf("%q, in recovery %v: %v; want ErrUnsupportedDialect naming %q", c.version, c.inRecovery, err, c.refused)
		}
	}
}

func TestMySQLVerdict(t *testing.T) {
	for _, c := range []struct {
		name    string
		vars    map[string]string
		members int
		refused string
	}{
		{"MariaDB", map[string]string{"read_only": "OFF", "wsrep_on": "OFF", "wsrep_provider": "none"}, 0, ""},
		{"MySQL 8", map[string]string{"read_only": "OFF"}, 0, ""},
		{"embedded engine without the variables", map[string]string{}, 0, ""},
		{"read-only replica", map[string]string{"read_only": "ON"}, 0, "read-only"},
		{"Aurora MySQL reader", map[string]string{"read_only": "OFF", "innodb_read_only": "ON"}, 0, "innodb_read_only"},
		{"go-mysql-server", map[string]string{"read_only": "0"}, 0, ""},
		{"Galera node", map[string]string{"read_only": "OFF", "wsrep_on": "ON", "wsrep_provider": "/usr/lib/galera/libgalera_smm.so"}, 0, "Galera"},
		{"wsrep_on without a provider", map[string]string{"wsrep_on": "ON", "wsrep_provider": "none"}, 0, ""},
		{"Group Replication, multi-primary", map[string]string{"read_only": "OFF", "group_replication_single_primary_mode": "OFF"}, 3, "multi-primary Group Replication"},
		{"Group Replication, multi-primary, alone", map[string]string{"read_only": "OFF", "group_replication_single_primary_mode": "OFF"}, 1, ""},
		{"Group Replication, single primary: the primary", map[string]string{"read_only": "OFF", "group_replication_single_primary_mode": "ON"}, 0, ""},
		{"Group Replication, single primary: a secondary", map[string]string{"read_only": "ON", "group_replication_single_primary_mode": "ON"}, 0, "read-only"},
	} {
		err := lockproto.MySQLVerdict(c.vars, c.members)
		if c.refused == "" {
			if err != nil {
				t.Errorf("%s: %v; want nil", c.name, err)
			}
			continue
		}
		if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), c.refused) {
			t.Errorf("%s: %v; want ErrUnsupportedDialect naming %q", c.name, err, c.refused)
		}
	}
}

// TestCheckServer: the servers of the suite hand out real locks; the check
// asks once per pool (a second call on a closed pool still passes: cached).
func TestCheckServer(t *testing.T) {
	for _, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			d := lockproto.Postgres
			if k.Dialect() == "mysql" {
				d = lockproto.MySQL
			}
			op, err := lockproto.NewOp(d, "Transaction", keys.Name("check-"+string(k)), config.Config{})
			if err != nil {
				t.Fatal(err)
			}
			db := testdb.Open(t, k)
			ctx := context.Background()
			if err := lockproto.CheckServer(ctx, op, db); err != nil {
				t.Fatalf("CheckServer: %v", err)
			}
			db.Close()
			if err := lockproto.CheckServer(ctx, op, db); err != nil {
				t.Fatalf("CheckServer on the closed pool (cached): %v", err)
			}
			other := testdb.Open(t, k)
			other.Close()
			if err := lockproto.CheckServer(ctx, op, other); err == nil {
				t.Fatal("CheckServer on a new, closed pool: nil; want the query's error (not cached)")
			}
		})
	}
}

// The first calls on a cold pool share one check: 200 callers at once open
// one connection between them, not one each (a service starting hundreds of
// Sessions at once would otherwise hit the server's connection limit).
func TestCheckServerOncePerPool(t *testing.T) {
	for _, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			d := lockproto.Postgres
			if k.Dialect() == "mysql" {
				d = lockproto.MySQL
			}
			op, err := lockproto.NewOp(d, "Session", keys.Name("check-once-"+string(k)), config.Config{})
			if err != nil {
				t.Fatal(err)
			}
			db := testdb.Open(t, k)
			db.SetMaxIdleConns(500) // every connection opened stays to be counted
			start := make(chan struct{})
			errc := make(chan error, 200)
			for range 200 {
				go func() {
					<-start
					errc <- lockproto.CheckServer(context.Background(), op, db)
				}()
			}
			close(start)
			for range 200 {
				if err := <-errc; err != nil {
					t.Fatalf("CheckServer: %v", err)
				}
			}
			if n := db.Stats().MaxOpenConnections; n != 0 {
				t.Fatalf("pool limit %d, want none for this test", n)
			}
			if opened := db.Stats().OpenConnections; opened > 1 {
				t.Fatalf("%d connections opened by 200 concurrent first checks, want 1", opened)
			}
		})
	}
}

// BenchmarkCheckServerCached is the cost a verb pays on every call after
// the first on a pool: a look-up keyed by a weak pointer to the pool.
func BenchmarkCheckServerCached(b *testing.B) {
	op, err := lockproto.NewOp(lockproto.Postgres, "Transaction", keys.Name("bench"), config.Config{})
	if err != nil {
		b.Fatal(err)
	}
	db := testdb.Open(b, testdb.Postgres)
	ctx := context.Background()
	if err := lockproto.CheckServer(ctx, op, db); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := lockproto.CheckServer(ctx, op, db); err != nil {
			b.Fatal(err)
		}
	}
}
