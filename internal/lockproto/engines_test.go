package lockproto_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/keys"
	"github.com/ormlock/ormlock/internal/lockproto"
)

// recorded is a database/sql driver that replays a server's recorded
// answers to the detection queries, and fails any other statement: the
// engines that cannot run here are judged by CheckServer from what they
// answer, and no lock behaviour is ever taken from it.
type recorded struct {
	answers map[string][][]driver.Value // query -> rows
	asked   []string
}

func (r *recorded) Connect(context.Context) (driver.Conn, error) { return recordedConn{r}, nil }
func (r *recorded) Driver() driver.Driver                        { return nil }

type recordedConn struct{ r *recorded }

func (c recordedConn) Prepare(string) (driver.Stmt, error) {
	return nil, errors.New("recorded: no prepare")
}
func (c recordedConn) Close() error              { return nil }
func (c recordedConn) Begin() (driver.Tx, error) { return nil, errors.New("recorded: no transactions") }

func (c recordedConn) QueryContext(_ context.Context, query string, args []driver.NamedValue) (driver.Rows, error) {
	c.r.asked = append(c.r.asked, query)
	for q, rows := range c.r.answers {
		if strings.Contains(query, q) {
			return &recordedRows{rows: rows}, nil
		}
	}
	return nil, fmt.Errorf("recorded: no answer to %q", query)
}

type recordedRows struct {
	rows [][]driver.Value
	i    int
}

func (r *recordedRows) Columns() []string {
	if len(r.rows) == 0 {
		return []string{"a", "b"}
	}
	cols := make([]string, len(r.rows[0]))
	for i := range cols {
		cols[i] = fmt.Sprint("c", i)
	}
	return cols
}
func (r *recordedRows) Close() error { return nil }
func (r *recordedRows) Next(dest []driver.Value) error {
	if r.i >= len(r.rows) {
		return io.EOF
	}
	copy(dest, r.rows[r.i])
	r.i++
	return nil
}

// Recorded answers: version() and pg_is_in_recovery() (PostgreSQL
// protocol), the variables of SHOW GLOBAL VARIABLES (MySQL protocol).
func pgAnswers(version string, ybSilence any) map[string][][]driver.Value {
	a := map[string][][]driver.Value{"SELECT version(), pg_is_in_recovery()": {{version, false}}}
	if ybSilence != nil {
		a["current_setting('"+lockproto.YBSilenceSetting+"'"] = [][]driver.Value{{ybSilence}}
	}
	return a
}

func mysqlAnswers(version string) map[string][][]driver.Value {
	return map[string][][]driver.Value{"SHOW GLOBAL VARIABLES": {
		{"innodb_read_only", "OFF"}, {"read_only", "OFF"}, {"version", version},
	}}
}

// TestFakeEngines judges the engines that fake some locks on their
// recorded answers: CockroachDB's session-level stubs refuse
// WithSharedLockConns on every release; YugabyteDB is refused before 2.25
// and whenever its silencing setting is on; TiDB refuses the verbs whose
// keepalive reads IS_USED_LOCK; PGlite refuses every verb.
func TestFakeEngines(t *testing.T) {
	const (
		crdb263 = "CockroachDB CCL v26.3.0 (x86_64-pc-linux-gnu, built 2026/08/01 12:00:00, go1.25.3)"
		crdb252 = "CockroachDB CCL v25.2.1 (x86_64-pc-linux-gnu, built 2025/06/02 12:00:00, go1.23.7)"
		yb220   = "PostgreSQL 11.2-YB-2.20.2.0-b0 on x86_64-pc-linux-gnu, compiled by clang version 16.0.6, 64-bit"
		yb225   = "PostgreSQL 15.2-YB-2.25.2.0-b0 on x86_64-pc-linux-gnu, compiled by clang version 17.0.6, 64-bit"
		yb2025  = "PostgreSQL 15.12-YB-2025.1.0.0-b0 on x86_64-pc-linux-gnu, compiled by clang version 17.0.6, 64-bit"
		tidb    = "8.0.11-TiDB-v7.5.1"
		pglite  = "PostgreSQL 18.6 (PGlite 0.5.14) on wasm32-unknown-emscripten, compiled by emcc (Emscripten gcc/clang-like replacement + linker emulating GNU ld) 6.0.5 (1db513782be24469589d7cb8a1f1834e9a33f271), 32-bit"
	)
	shared := ormlock.WithSharedLockConns(2)
	claim := ormlock.WithClaim()
	for _, c := range []struct {
		name    string
		d       lockproto.Dialect
		answers map[string][][]driver.Value
		verb    string
		hold    lockproto.Holding
		opts    []ormlock.Option
		refused string // "" when allowed
	}{
		{"CockroachDB 26.3 Transaction", lockproto.Postgres, pgAnswers(crdb263, nil), "Transaction", lockproto.HeldForTx, nil, ""},
		{"CockroachDB 26.3 Session", lockproto.Postgres, pgAnswers(crdb263, nil), "Session", lockproto.HeldForSession, nil, ""},
		{"CockroachDB 26.3 Session, shared connections", lockproto.Postgres, pgAnswers(crdb263, nil), "Session", lockproto.HeldForSession, []ormlock.Option{shared}, "session-level advisory lock functions are no-op stubs"},
		{"CockroachDB 26.3 Lead, shared connections", lockproto.Postgres, pgAnswers(crdb263, nil), "Lead", lockproto.HeldForLead, []ormlock.Option{shared}, "no-op stubs"},
		{"CockroachDB 25.2 Transaction", lockproto.Postgres, pgAnswers(crdb252, nil), "Transaction", lockproto.HeldForTx, nil, "CockroachDB v25.2"},
		{"YugabyteDB 2.20", lockproto.Postgres, pgAnswers(yb220, "off"), "Transaction", lockproto.HeldForTx, nil, "YugabyteDB 2.20 has no advisory locks"},
		{"YugabyteDB 2.20 silenced", lockproto.Postgres, pgAnswers(yb220, "on"), "Transaction", lockproto.HeldForTx, nil, lockproto.YBSilenceSetting},
		{"YugabyteDB 2.25", lockproto.Postgres, pgAnswers(yb225, "off"), "Transaction", lockproto.HeldForTx, nil, ""},
		{"YugabyteDB 2.25 silenced", lockproto.Postgres, pgAnswers(yb225, "on"), "Session", lockproto.HeldForSession, nil, lockproto.YBSilenceSetting},
		{"YugabyteDB 2025.1", lockproto.Postgres, pgAnswers(yb2025, "off"), "Session", lockproto.HeldForSession, nil, ""},
		{"YugabyteDB 2025.1 silenced", lockproto.Postgres, pgAnswers(yb2025, "on"), "Transaction", lockproto.HeldForTx, nil, lockproto.YBSilenceSetting},
		{"TiDB Transaction", lockproto.MySQL, mysqlAnswers(tidb), "Transaction", lockproto.HeldForTx, nil, ""},
		{"TiDB RunOnce", lockproto.MySQL, mysqlAnswers(tidb), "RunOnce", lockproto.HeldForTx, nil, ""},
		{"TiDB Session", lockproto.MySQL, mysqlAnswers(tidb), "Session", lockproto.HeldForSession, nil, "IS_USED_LOCK"},
		{"TiDB Lead", lockproto.MySQL, mysqlAnswers(tidb), "gormlock.Lead", lockproto.HeldForLead, nil, "IS_USED_LOCK"},
		{"TiDB RunOnce claim", lockproto.MySQL, mysqlAnswers(tidb), "gormlock.RunOnce", lockproto.HeldForSession, []ormlock.Option{claim}, "IS_USED_LOCK"},
		{"MariaDB Session", lockproto.MySQL, mysqlAnswers("10.11.19-MariaDB-0+deb12u1"), "Session", lockproto.HeldForSession, nil, ""},
		{"PGlite Transaction", lockproto.Postgres, pgAnswers(pglite, nil), "Transaction", lockproto.HeldForTx, nil, "PGlite"},
		{"PGlite Session", lockproto.Postgres, pgAnswers(pglite, nil), "Session", lockproto.HeldForSession, nil, "PGlite"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := &recorded{answers: c.answers}
			db := sql.OpenDB(r)
			defer db.Close()
			op, err := lockproto.NewOpHeld(c.d, c.verb, keys.Name("fake-engine"), config.New(c.opts...), c.hold)
			if err != nil {
				t.Fatal(err)
			}
			for round := range 2 { // asked, then from the cache
				err = lockproto.CheckServer(context.Background(), op, db)
				if c.refused == "" {
					if err != nil {
						t.Errorf("round %d: %v, want nil", round, err)
					}
				} else if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), c.refused) {
					t.Errorf("round %d: %v, want ErrUnsupportedDialect naming %q", round, err, c.refused)
				}
			}
			if c.refused == "" && !strings.Contains(c.name, "Yugabyte") && len(r.asked) != 1 {
				t.Errorf("asked %d statements (%q), want one, then the cache", len(r.asked), r.asked)
			}
		})
	}
}

// TestCheckServerForgetsAfterLoss: a pool's genuine verdict is dropped when
// a verb of the pool loses its lock or fails to release it, and the next
// call asks again (here the server behind the pool has become a standby);
// an ordinary release keeps it. The end-to-end case, on a real primary and
// standby, is failover.TestServerCheckAskedAgainAfterLoss.
func TestCheckServerForgetsAfterLoss(t *testing.T) {
	for _, kind := range []config.EventKind{config.EventLockLost, config.EventReleaseFailed} {
		r := &recorded{answers: pgAnswers("PostgreSQL 15.14 on x86_64-pc-linux-gnu", nil)}
		db := sql.OpenDB(r)
		defer db.Close()
		newOp := func() *lockproto.Op {
			op, err := lockproto.NewOpHeld(lockproto.Postgres, "Session", keys.Name("forget"), config.Config{}, lockproto.HeldForSession)
			if err != nil {
				t.Fatal(err)
			}
			return op
		}
		first := newOp()
		if err := lockproto.CheckServer(context.Background(), first, db); err != nil {
			t.Fatal(err)
		}
		first.Emit(context.Background(), config.EventReleased, nil)
		if err := lockproto.CheckServer(context.Background(), newOp(), db); err != nil || len(r.asked) != 1 {
			t.Fatalf("after a release: %v, %d questions; want the cached verdict", err, len(r.asked))
		}
		r.answers = map[string][][]driver.Value{"SELECT version(), pg_is_in_recovery()": {{"PostgreSQL 15.14 on x86_64-pc-linux-gnu", true}}}
		first.Emit(context.Background(), kind, errors.New("connection gone"))
		err := lockproto.CheckServer(context.Background(), newOp(), db)
		if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), "hot standby") {
			t.Errorf("after event %d: %v, want the standby refused", kind, err)
		}
	}
}

// TestRefusalsNameLeases: where a server's advisory or named locks exclude
// nobody but a lease row would (Galera, multi-primary Group Replication,
// CockroachDB's and YugabyteDB's stubs, TiDB's keepalive), the refusal names
// WithLease and the command's --lease; where a lease cannot help either (a
// standby, a read-only replica, PGlite), it does not.
func TestRefusalsNameLeases(t *testing.T) {
	galera := map[string]string{"wsrep_on": "ON", "wsrep_provider": "/usr/lib/galera/libgalera_smm.so"}
	multi := map[string]string{"group_replication_single_primary_mode": "OFF"}
	_, yb := lockproto.PostgresEngineVerdict("PostgreSQL 11.2-YB-2.20.2.0-b0 on x86_64-pc-linux-gnu", "off")
	_, ybSilenced := lockproto.PostgresEngineVerdict("PostgreSQL 15.2-YB-2.25.2.0-b0 on x86_64-pc-linux-gnu", "on")
	crdbSession, _ := lockproto.PostgresEngineVerdict("CockroachDB CCL v26.3.0 (x86_64-pc-linux-gnu)", "")
	_, pglite := lockproto.PostgresEngineVerdict("PostgreSQL 18.6 (PGlite 0.5.14) on wasm32-unknown-emscripten", "")
	for _, c := range []struct {
		name  string
		err   error
		lease bool
	}{
		{"Galera", lockproto.MySQLVerdict(galera, 0), true},
		{"multi-primary Group Replication", lockproto.MySQLVerdict(multi, 3), true},
		{"CockroachDB 25.2", lockproto.PostgresVerdict("CockroachDB CCL v25.2.1 (x86_64-pc-linux-gnu)", false), true},
		{"CockroachDB of unknown version", lockproto.PostgresVerdict("CockroachDB", false), true},
		{"CockroachDB session-level stubs", crdbSession, true},
		{"YugabyteDB 2.20", yb, true},
		{"YugabyteDB silenced", ybSilenced, true},
		{"TiDB keepalive", lockproto.MySQLKeepaliveVerdict("8.0.11-TiDB-v7.5.1"), true},
		{"hot standby", lockproto.PostgresVerdict("PostgreSQL 15.14", true), false},
		{"read-only replica", lockproto.MySQLVerdict(map[string]string{"read_only": "ON"}, 0), false},
		{"PGlite", pglite, false},
	} {
		if c.err == nil {
			t.Errorf("%s: not refused", c.name)
			continue
		}
		msg := c.err.Error()
		named := strings.Contains(msg, "ormlock.WithLease(ttl)") && strings.Contains(msg, "--lease TTL")
		if named != c.lease {
			t.Errorf("%s: %q names a lease: %v, want %v", c.name, msg, named, c.lease)
		}
	}
}
