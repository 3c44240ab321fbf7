package chaos_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// canary creates the table "canary" with one row, the target of the
// injection strings, and checks at cleanup that it is still there, intact.
func canary(t *testing.T, k testdb.Kind, admin *sql.DB) {
	t.Helper()
	_, _ = admin.Exec("DROP TABLE IF EXISTS canary")
	if _, err := admin.Exec("CREATE TABLE canary (v INT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec("INSERT INTO canary (v) VALUES (42)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		var n, v int
		if err := admin.QueryRow("SELECT COUNT(*), MAX(v) FROM canary").Scan(&n, &v); err != nil || n != 1 || v != 42 {
			t.Errorf("%s: canary table damaged: rows=%d v=%d err=%v", k, n, v, err)
		}
		_, _ = admin.Exec("DROP TABLE IF EXISTS canary")
	})
}

// serverLockMatches checks, inside fn, that the server holds the lock under
// the exact derived name: on MariaDB IS_USED_LOCK of the name the caller
// passed, byte for byte (names of at most 64 bytes are used as they are); on
// PostgreSQL the key the server itself computes from the name with the
// keyhash spec's SQL expression.
func serverLockMatches(t *testing.T, d string, admin *sql.DB, ns, name string) {
	t.Helper()
	if d == "mysql" {
		full := name
		if ns != "" {
			full = ns + ":" + name
		}
		if len(full) > keyhash.MySQLMaxName {
			full = keyhash.MySQLName(ns, name)
		}
		var id sql.NullInt64
		if err := admin.QueryRow("SELECT IS_USED_LOCK(?)", full).Scan(&id); err != nil || !id.Valid {
			t.Errorf("IS_USED_LOCK(%q) = %v, %v: the lock is not held under the name as given", full, id, err)
		}
		return
	}
	// the server computes the key of a plain name itself; a namespaced key
	// hashes ns + NUL + name, which PostgreSQL text cannot carry: Go's key
	key := keyhash.Int64NS(ns, name)
	if ns == "" {
		if err := admin.QueryRow(`SELECT ('x' || left(encode(sha256(convert_to($1, 'UTF8')), 'hex'), 16))::bit(64)::bigint`, name).Scan(&key); err != nil {
			t.Fatalf("psql key of %q: %v", name, err)
		}
	}
	c, o := pgTag(key)
	var n int
	if err := admin.QueryRow(`SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND granted
AND objsubid = 1 AND classid::int8 = $1 AND objid::int8 = $2`, c, o).Scan(&n); err != nil || n != 1 {
		t.Errorf("pg_locks rows for the key of %q: %d, %v; want 1", name, n, err)
	}
}

// TestInjectionNames passes SQL injection strings as lock names,
// namespaces and RunOnce job names on every server. Lock names are always
// bound parameters: each string locks and releases exactly the lock its
// text names (the server holds the name byte for byte on MariaDB, the key
// the server computes from it on PostgreSQL), RunOnce records the job name
// verbatim, and the canary table the strings target survives intact.
func TestInjectionNames(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		d := k.Dialect()
		admin := testdb.AdminDB(t, k)
		db, _ := openGorm(t, k)
		canary(t, k, admin)
		led := ledgerTable(t, db, admin)
		names := 0
		for i, name := range nameSeeds {
			if ormlock.Name(name).Validate() != nil {
				continue
			}
			names++
			for _, ns := range []string{"", strings.ReplaceAll(name, ":", "")} {
				if ns != "" && i%2 == 1 {
					continue // namespaces: every other seed
				}
				if config.New(ormlock.WithNamespace(ns)).Err() != nil {
					continue
				}
				lock := lockName{key: ormlock.Name(name), ns: ns}
				err := gormlock.Transaction(db, name, func(tx *gorm.DB) error {
					serverLockMatches(t, d, admin, ns, name)
					return tx.Exec("SELECT 1").Error
				}, ormlock.WithNamespace(ns))
				if err != nil {
					t.Fatalf("Transaction(%q, ns %q): %v", name, ns, err)
				}
				mustFree(t, d, admin, lock)
				err = gormlock.Session(db, name, func(ctx context.Context) error {
					serverLockMatches(t, d, admin, ns, name)
					return nil
				}, ormlock.WithNamespace(ns))
				if err != nil {
					t.Fatalf("Session(%q, ns %q): %v", name, ns, err)
				}
				mustFree(t, d, admin, lock)
			}
			if job := name; len([]rune(job)) <= 191 && !strings.HasSuffix(job, " ") {
				slot := time.Date(2036, 6, 6, 0, 0, 0, 0, time.UTC)
				ran := 0
				if err := gormlock.RunOnce(db, job, slot, func(tx *gorm.DB) error { ran++; return nil }, ormlock.WithLedgerTable(led)); err != nil {
					t.Fatalf("RunOnce(job %q): %v", job, err)
				}
				if err := gormlock.RunOnce(db, job, slot, func(tx *gorm.DB) error { ran++; return nil }, ormlock.WithLedgerTable(led)); !errors.Is(err, ormlock.ErrAlreadyDone) {
					t.Fatalf("RunOnce(job %q) again: %v, want ErrAlreadyDone", job, err)
				}
				rs, err := gormlock.Runs(db, job, 10, ormlock.WithLedgerTable(led))
				if err != nil {
					t.Fatal(err)
				}
				if ran != 1 || len(rs) != 1 || rs[0].Job != job {
					t.Fatalf("RunOnce(job %q): ran %d, ledger %+v", job, ran, rs)
				}
				mustFree(t, d, admin, lockName{key: ormlock.RunKey(job, slot)})
			}
		}
		// "Job" and "job" are two locks on both dialects (MariaDB 10.11
		// compares user lock names byte for byte, although its manual says
		// case-insensitively); logged, not asserted, since a server that
		// folds case would only over-exclude.
		_ = gormlock.Transaction(db, "Job", func(*gorm.DB) error {
			free, err := lockFree(context.Background(), d, admin, named("job"))
			t.Logf("figure: %s: while \"Job\" is held, \"job\" is free: %v (%v)", k, free, err)
			return nil
		})
		t.Logf("figure: %s: %d injection and odd names locked and released with Transaction and Session (with and without a namespace) and used as RunOnce job names; canary intact", k, names)
	})
}

// badTables are ledger table names that must be refused.
var badTables = []string{
	"canary; DROP TABLE canary",
	"ormlock_runs; --",
	"robert'); DROP TABLE canary; --",
	`"quoted"`,
	"`backtick`",
	"schema.table",
	"1starts_with_digit",
	"",
	"has space",
	"dash-ed",
	"ünïcode",
	strings.Repeat("a", 64),
	"nul\x00",
}

// TestLedgerTableNameValidated gives RunOnce, Runs, Migrate and the plugin
// ledger table names that are not plain identifiers. Each call fails with
// ErrInvalidArgument before any SQL is sent: on a pool whose server does
// not exist (any statement would fail with a connection error instead, and
// the pool opens no connection), and on a real server, where the canary
// table survives and no table is created.
func TestLedgerTableNameValidated(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		admin := testdb.AdminDB(t, k)
		real, _ := openGorm(t, k)
		canary(t, k, admin)
		dead := "postgres://postgres@127.0.0.1:1/ormlock?sslmode=disable&connect_timeout=2"
		if k.Dialect() == "mysql" {
			dead = "root@tcp(127.0.0.1:1)/ormlock?timeout=2s"
		}
		deadDB, deadSQL := openDSN(t, k, dead)
		tables := func() int {
			q := "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE()"
			if k.Dialect() == "postgres" {
				q = "SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema()"
			}
			var n int
			if err := admin.QueryRow(q).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		before := tables()
		slot := time.Date(2036, 7, 7, 0, 0, 0, 0, time.UTC)
		for _, bad := range badTables {
			opt := ormlock.WithLedgerTable(bad)
			if err := config.New(opt).Err(); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("WithLedgerTable(%q): %v, want ErrInvalidArgument", bad, err)
			}
			for _, db := range []*gorm.DB{deadDB, real} {
				called := false
				calls := map[string]error{
					"Migrate": gormlock.Migrate(db, opt),
					"RunOnce": gormlock.RunOnce(db, "chaos-bad-ledger", slot, func(*gorm.DB) error { called = true; return nil }, opt),
					"Runs":    func() error { _, err := gormlock.Runs(db, "chaos-bad-ledger", 10, opt); return err }(),
					"Use":     db.Session(&gorm.Session{NewDB: true}).Use(gormlock.New(opt)),
				}
				for verb, err := range calls {
					if !errors.Is(err, ormlock.ErrInvalidArgument) {
						t.Errorf("%s with ledger table %q: %v, want ErrInvalidArgument", verb, bad, err)
					} else if !strings.Contains(err.Error(), "table") {
						t.Errorf("%s with ledger table %q: %q does not name the table", verb, bad, err)
					}
				}
				if called {
					t.Errorf("fn called with ledger table %q", bad)
				}
			}
		}
		if n := deadSQL.Stats().OpenConnections; n != 0 {
			t.Errorf("the pool to nowhere opened %d connection(s): something was sent", n)
		}
		if after := tables(); after != before {
			t.Errorf("tables in the schema: %d before, %d after", before, after)
		}
		t.Logf("figure: %s: %d bad ledger table names x Migrate/RunOnce/Runs/plugin -> ErrInvalidArgument, no connection opened, no table created, canary intact", k, len(badTables))
	})
}

// TestNamespacesAcrossDatabases shows the hazard of MySQL's server-wide
// lock names and the namespace option that removes it. Two pools on two
// databases (schemas) of one MariaDB server: the same lock name without a
// namespace excludes across them; with a namespace per tenant they do not.
// PostgreSQL, for contrast, keeps advisory locks per database: the same key
// in two databases never excludes (directly or through PgBouncer).
func TestNamespacesAcrossDatabases(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		d := k.Dialect()
		admin := testdb.AdminDB(t, k)
		dbs := []string{"chaos_tenant_a", "chaos_tenant_b"}
		for _, name := range dbs {
			if d == "postgres" {
				_, _ = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)")
				if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name + " WITH (FORCE)") })
			} else {
				if _, err := admin.Exec("CREATE DATABASE IF NOT EXISTS " + name); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE IF EXISTS " + name) })
			}
		}
		dsn := testdb.DSN(t, k)
		dbA, sqlA := openDSN(t, k, testdb.WithDatabase(t, dsn, dbs[0]))
		dbB, sqlB := openDSN(t, k, testdb.WithDatabase(t, dsn, dbs[1]))
		t.Cleanup(func() {
			testdb.AssertNoLeaks(t, k, sqlA, sqlB)
			if d == "postgres" {
				var n int
				if err := admin.QueryRow(`SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory'
AND database IN (SELECT oid FROM pg_database WHERE datname LIKE 'chaos_tenant_%')`).Scan(&n); err != nil || n != 0 {
					t.Errorf("advisory locks left in the tenant databases: %d (%v)", n, err)
				}
			}
		})
		const name = "nightly-report"
		// B tries while A holds
		probe := func(nsA, nsB string) error {
			var errB error
			err := gormlock.Transaction(dbA, name, func(*gorm.DB) error {
				errB = gormlock.Transaction(dbB, name, func(*gorm.DB) error { return nil }, ormlock.WithNamespace(nsB))
				return nil
			}, ormlock.WithNamespace(nsA))
			if err != nil {
				t.Fatalf("A: %v", err)
			}
			return errB
		}
		same := probe("", "")
		apart := probe("tenant-a", "tenant-b")
		t.Logf("figure: %s, two databases, same name %q: no namespace -> B gets %v; namespaces tenant-a/tenant-b -> B gets %v", k, name, same, apart)
		if apart != nil {
			t.Errorf("different namespaces: B got %v, want the lock", apart)
		}
		if d == "mysql" {
			if !errors.Is(same, ormlock.ErrNotAcquired) {
				t.Errorf("MariaDB, no namespace: B got %v, want ErrNotAcquired (lock names are server-wide)", same)
			}
		} else if same != nil {
			t.Errorf("PostgreSQL, no namespace: B got %v, want the lock (advisory locks are per database)", same)
		}
		// a namespace also separates a Session from a Transaction
		err := gormlock.Session(dbA, name, func(ctx context.Context) error {
			return gormlock.Transaction(dbB, name, func(*gorm.DB) error { return nil }, ormlock.WithNamespace("tenant-b"))
		}, ormlock.WithNamespace("tenant-a"))
		if err != nil {
			t.Errorf("Session in tenant-a, Transaction in tenant-b: %v", err)
		}
	})
}

// TestLeastPrivilege runs every verb as database users without special
// rights. PostgreSQL: a plain LOGIN role with CONNECT on the database and
// USAGE and CREATE on a schema of its own (for Migrate), and a second role
// with only USAGE on that schema and SELECT, INSERT, UPDATE, DELETE on the
// ledger table. MariaDB: a user with CREATE, SELECT, INSERT, UPDATE, DELETE
// on the ledger table only (CREATE for Migrate), and one without CREATE.
// Advisory locks and GET_LOCK need no grant. (PgBouncer is left out: the
// test PgBouncer logs in to PostgreSQL as one fixed user, so the client's
// role never reaches the server.)
func TestLeastPrivilege(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			admin := testdb.AdminDB(t, k)
			dsn := testdb.DSN(t, k)
			led := "chaos_ledger"
			var appDSN, runnerDSN string
			exec := func(q string) {
				t.Helper()
				if _, err := admin.Exec(q); err != nil {
					t.Fatalf("%s: %v", q, err)
				}
			}
			if k == testdb.Postgres {
				if !strings.HasPrefix(dsn, "postgres://postgres@") {
					t.Skipf("DSN %q: cannot derive a role's DSN", dsn)
				}
				cleanup := func() {
					for _, q := range []string{"DROP SCHEMA IF EXISTS chaos_app CASCADE", "DROP OWNED BY chaos_app", "DROP OWNED BY chaos_runner",
						"DROP ROLE IF EXISTS chaos_app", "DROP ROLE IF EXISTS chaos_runner"} {
						_, _ = admin.Exec(q)
					}
				}
				cleanup()
				t.Cleanup(cleanup)
				exec("CREATE ROLE chaos_app LOGIN")
				exec("CREATE ROLE chaos_runner LOGIN")
				exec("GRANT CONNECT ON DATABASE ormlock TO chaos_app, chaos_runner")
				exec("CREATE SCHEMA chaos_app")
				exec("GRANT USAGE, CREATE ON SCHEMA chaos_app TO chaos_app")
				exec("GRANT USAGE ON SCHEMA chaos_app TO chaos_runner")
				var attrs string
				if err := admin.QueryRow(`SELECT string_agg(rolname || ':' || rolsuper || rolcreatedb || rolcreaterole || rolreplication || rolbypassrls, ' ')
FROM pg_roles WHERE rolname IN ('chaos_app', 'chaos_runner')`).Scan(&attrs); err != nil {
					t.Fatal(err)
				}
				t.Logf("roles (super, createdb, createrole, replication, bypassrls): %s", attrs)
				appDSN = strings.Replace(dsn, "postgres://postgres@", "postgres://chaos_app@", 1) + "&search_path=chaos_app"
				runnerDSN = strings.Replace(dsn, "postgres://postgres@", "postgres://chaos_runner@", 1) + "&search_path=chaos_app"
			} else {
				if !strings.HasPrefix(dsn, "root@") {
					t.Skipf("DSN %q: cannot derive a user's DSN", dsn)
				}
				cleanup := func() {
					_, _ = admin.Exec("DROP USER IF EXISTS 'chaos_app'@'%', 'chaos_runner'@'%'")
					_, _ = admin.Exec("DROP TABLE IF EXISTS " + led + ", " + led + "_fence, " + led + "_controls, " + led + "_actions")
				}
				cleanup()
				t.Cleanup(cleanup)
				exec("CREATE USER 'chaos_app'@'%'")
				exec("CREATE USER 'chaos_runner'@'%'")
				exec("GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON ormlock." + led + " TO 'chaos_app'@'%'")
				// Migrate creates the fencing counters' table beside the ledger
				exec("GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON ormlock." + led + "_fence TO 'chaos_app'@'%'")
				// and the lease and rate limit tables (their default names)
				exec("GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON ormlock.ormlock_leases TO 'chaos_app'@'%'")
				exec("GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON ormlock.ormlock_rate_tokens TO 'chaos_app'@'%'")
				// and the operators' controls table and actions log beside the ledger
				exec("GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON ormlock." + led + "_controls TO 'chaos_app'@'%'")
				exec("GRANT CREATE, SELECT, INSERT, UPDATE, DELETE ON ormlock." + led + "_actions TO 'chaos_app'@'%'")
				appDSN = strings.Replace(dsn, "root@", "chaos_app@", 1)
				runnerDSN = strings.Replace(dsn, "root@", "chaos_runner@", 1)
			}
			verbs := func(t *testing.T, who string, db *gorm.DB, slot time.Time) {
				t.Helper()
				key := "chaos-least-" + who + "-" + string(k)
				if err := gormlock.Transaction(db, key, func(tx *gorm.DB) error { return tx.Exec("SELECT 1").Error }); err != nil {
					t.Errorf("%s: Transaction: %v", who, err)
				}
				if err := gormlock.Transaction(db, key, func(tx *gorm.DB) error { return nil }, ormlock.WithWait(time.Second)); err != nil {
					t.Errorf("%s: Transaction with wait: %v", who, err)
				}
				if err := gormlock.Session(db, key, func(ctx context.Context) error { return db.WithContext(ctx).Exec("SELECT 1").Error },
					ormlock.WithKeepalive(100*time.Millisecond)); err != nil {
					t.Errorf("%s: Session: %v", who, err)
				}
				for _, claim := range []bool{false, true} {
					opts := []ormlock.Option{ormlock.WithLedgerTable(led)}
					s := slot
					if claim {
						opts = append(opts, ormlock.WithClaim())
						s = slot.Add(time.Hour)
					}
					if err := gormlock.RunOnce(db, key, s, func(tx *gorm.DB) error { return nil }, opts...); err != nil {
						t.Errorf("%s: RunOnce (claim %v): %v", who, claim, err)
					}
					if err := gormlock.RunOnce(db, key, s, func(tx *gorm.DB) error { return nil }, opts...); !errors.Is(err, ormlock.ErrAlreadyDone) {
						t.Errorf("%s: RunOnce again (claim %v): %v, want ErrAlreadyDone", who, claim, err)
					}
				}
				if rs, err := gormlock.Runs(db, key, 10, ormlock.WithLedgerTable(led)); err != nil || len(rs) != 2 {
					t.Errorf("%s: Runs: %d rows, %v", who, len(rs), err)
				}
			}
			app, appSQL := openDSN(t, k, appDSN)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, appSQL) })
			if err := gormlock.Migrate(app, ormlock.WithLedgerTable(led)); err != nil {
				t.Fatalf("chaos_app: Migrate: %v", err)
			}
			slot := time.Date(2037, 1, 1, 0, 0, 0, 0, time.UTC)
			verbs(t, "app", app, slot)

			// the runner has no CREATE: only its rights on the ledger table,
			// and on the controls table, whose pause flag every claim reads
			// and whose schedule RunScheduled records (docs/OPERATIONS.md,
			// The tables)
			if k == testdb.Postgres {
				exec("GRANT SELECT, INSERT, UPDATE, DELETE ON chaos_app." + led + " TO chaos_runner")
				exec("GRANT SELECT, INSERT, UPDATE ON chaos_app." + led + "_controls TO chaos_runner")
			} else {
				exec("GRANT SELECT, INSERT, UPDATE, DELETE ON ormlock." + led + " TO 'chaos_runner'@'%'")
				exec("GRANT SELECT, INSERT, UPDATE ON ormlock." + led + "_controls TO 'chaos_runner'@'%'")
				var grants []string
				rows, err := admin.Query("SHOW GRANTS FOR 'chaos_runner'@'%'")
				if err != nil {
					t.Fatal(err)
				}
				for rows.Next() {
					var g string
					_ = rows.Scan(&g)
					grants = append(grants, g)
				}
				rows.Close()
				t.Logf("chaos_runner grants: %s", strings.Join(grants, "; "))
			}
			runner, runnerSQL := openDSN(t, k, runnerDSN)
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, runnerSQL) })
			verbs(t, "runner", runner, slot.Add(24*time.Hour))
			err := gormlock.Migrate(runner, ormlock.WithLedgerTable(led))
			t.Logf("figure: %s: Transaction, Session, RunOnce (both modes), Runs work for a user with no special rights; Migrate of the existing table by the user without CREATE: %v", k, err)
			// the runner cannot create other tables
			if err := runner.Exec("CREATE TABLE chaos_runner_table (x INT)").Error; err == nil {
				_ = runner.Exec("DROP TABLE chaos_runner_table")
				t.Errorf("the runner could create a table: the test's grants are wider than intended")
			} else {
				t.Logf("runner CREATE TABLE refused as intended: %v", err)
			}
		})
	}
}

// TestRunOnceJobNamesExact runs pairs of job names that differ only in case,
// Unicode normalisation or trailing whitespace other than a space: they are
// different jobs, so each runs once and Runs returns each job's own row, on
// every dialect. A job name ending with a space is refused with
// ErrInvalidArgument: MySQL/MariaDB compare the ledger's job column ignoring
// trailing spaces (PAD SPACE), so "report " would share the row of "report"
// and never run (found by this suite; see internal/ledger.ValidateJob).
func TestRunOnceJobNamesExact(t *testing.T) {
	testdb.ForEachKind(t, func(t *testing.T, k testdb.Kind) {
		admin := testdb.AdminDB(t, k)
		db, _ := openGorm(t, k)
		led := ledgerTable(t, db, admin)
		slot := time.Date(2036, 8, 8, 0, 0, 0, 0, time.UTC)
		for _, pair := range [][2]string{{"report", "Report"}, {"caf\u00e9", "cafe\u0301"}, {"x", "x\t"}, {"y", "y\u00a0"}} {
			for _, job := range pair {
				ran := false
				err := gormlock.RunOnce(db, job, slot, func(*gorm.DB) error { ran = true; return nil }, ormlock.WithLedgerTable(led))
				if err != nil || !ran {
					t.Errorf("RunOnce(%q) after %q: ran=%v err=%v", job, pair[0], ran, err)
				}
			}
			for _, job := range pair {
				rs, err := gormlock.Runs(db, job, 10, ormlock.WithLedgerTable(led))
				if err != nil || len(rs) != 1 || rs[0].Job != job {
					t.Errorf("Runs(%q): %+v, %v; want its own single row", job, rs, err)
				}
			}
		}
		for _, job := range []string{"report ", " ", "z  "} {
			err := gormlock.RunOnce(db, job, slot, func(*gorm.DB) error { return nil }, ormlock.WithLedgerTable(led))
			if !errors.Is(err, ormlock.ErrInvalidArgument) || !strings.Contains(err.Error(), "space") {
				t.Errorf("RunOnce(%q): %v, want ErrInvalidArgument naming the trailing space", job, err)
			}
			if _, err := gormlock.Runs(db, job, 10, ormlock.WithLedgerTable(led)); !errors.Is(err, ormlock.ErrInvalidArgument) {
				t.Errorf("Runs(%q): %v, want ErrInvalidArgument", job, err)
			}
		}
	})
}

// TestSharedLockTableExhausted shows the hazard docs/RELIABILITY.md's
// Security section documents: advisory keys are per database, but
// PostgreSQL's lock table is per server. A plain LOGIN role connected to
// another database fills it with session-level advisory locks; then
// ormlock's calls in the application's database fail, and ormlock reports
// the server's error (SQLSTATE 53200, out of shared memory), not
// ErrNotAcquired. Once the role lets go, ormlock works again. A private
// server, so that no other test sees the full table.
func TestSharedLockTableExhausted(t *testing.T) {
	srv := testdb.Start(t, testdb.Postgres)
	admin, err := sql.Open("pgx", srv.AdminDSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	for _, q := range []string{"CREATE DATABASE chaos_other", "CREATE ROLE chaos_filler LOGIN", "GRANT CONNECT ON DATABASE chaos_other TO chaos_filler"} {
		if _, err := admin.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	dsn := srv.DSN()
	if !strings.HasPrefix(dsn, "postgres://postgres@") || !strings.Contains(dsn, "/ormlock?") {
		t.Skipf("DSN %q: cannot derive the filler's DSN", dsn)
	}
	filler, err := sql.Open("pgx", strings.Replace(strings.Replace(dsn, "postgres://postgres@", "postgres://chaos_filler@", 1), "/ormlock?", "/chaos_other?", 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { filler.Close() })
	ctx := context.Background()
	// the application's pool has a connection open before the table fills
	db, sqlDB := openDSN(t, testdb.Postgres, dsn)
	if err := sqlDB.Ping(); err != nil {
		t.Fatal(err)
	}
	conn, err := filler.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	var fillErr error
	for from := 1; from < 1_000_000 && fillErr == nil; from += 1000 {
		var n int
		fillErr = conn.QueryRowContext(ctx, "SELECT count(pg_advisory_lock(g)) FROM generate_series($1::int8, $1::int8 + 999) g", from).Scan(&n)
		held += n
	}
	if err := conn.QueryRowContext(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()").Scan(&held); err != nil {
		t.Logf("count the filler's locks: %v", err)
	}
	t.Logf("figure: a plain role in another database held %d advisory locks before: %v", held, fillErr)

	err = gormlock.Transaction(db, "chaos-locktable", func(*gorm.DB) error { t.Error("fn ran"); return nil })
	var pe *pgconn.PgError
	if errors.Is(err, ormlock.ErrNotAcquired) || !errors.As(err, &pe) || pe.Code != "53200" {
		t.Errorf("Transaction with the lock table full: %v; want the server's SQLSTATE 53200, not ErrNotAcquired", err)
	}
	t.Logf("figure: Transaction on an open connection with the shared lock table full: %v", err)
	sqlDB.SetMaxIdleConns(0) // the next call needs a new connection
	err = gormlock.Transaction(db, "chaos-locktable", func(*gorm.DB) error { t.Error("fn ran"); return nil })
	if errors.Is(err, ormlock.ErrNotAcquired) || !errors.As(err, &pe) || pe.Code != "53200" {
		t.Errorf("Transaction on a new connection: %v; want SQLSTATE 53200", err)
	}
	t.Logf("figure: Transaction on a new connection: %v", err)
	sqlDB.SetMaxIdleConns(2)

	if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_unlock_all()"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	if err := gormlock.Transaction(db, "chaos-locktable", func(*gorm.DB) error { return nil }); err != nil {
		t.Errorf("Transaction after the filler let go: %v", err)
	}
	srv.AssertNoLeaks(t, sqlDB)
}
