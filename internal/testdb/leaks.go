package testdb

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
)

// envMySQLLocks, set to "skip", makes the MySQL leak check skip the listing
// of user locks, for engines that cannot list them (go-mysql-server, in make
// compat); without it such an engine fails every leak check.
const envMySQLLocks = "ORMLOCK_TEST_MYSQL_LOCKS"

const (
	leakTimeout = 5 * time.Second
	leakPoll    = 50 * time.Millisecond
)

// Leaks checks once, on the shared server of kind k, that no lock is held and
// that no connection of dbs is in use: no advisory lock in pg_locks (in the
// kind's own database: Postgres and PgBouncer use two databases of the shared
// PostgreSQL, so that tests of the two kinds running in parallel never see
// each other's locks, while a lock left by either is still reported), no
// user lock (GET_LOCK) on the server for MariaDB/MySQL (MariaDB's
// information_schema.METADATA_LOCK_INFO, else MySQL's
// performance_schema.metadata_locks; an error when the server has neither),
// and Stats().InUse == 0 for each db. MariaDB's named locks are server-wide;
// the MariaDB server is the test binary's own and its tests of one kind run
// one at a time, so every user lock found is the tests'. It returns nil when nothing leaks, else an error listing what
// remains. The admin pool's own connections hold no locks and are not counted.
func Leaks(k Kind, dbs ...*sql.DB) error {
	admin, err := adminDB(k)
	if err != nil {
		return err
	}
	return checkLeaks(k.Dialect(), admin, dbs)
}

// AssertNoLeaks polls Leaks every 50ms for up to 5s and fails the test
// (tb.Errorf) with what remains if it never comes back clean.
func AssertNoLeaks(tb testing.TB, k Kind, dbs ...*sql.DB) {
	tb.Helper()
	if k.Dialect() == "mysql" && os.Getenv(envMySQLLocks) == "skip" {
		tb.Logf("testdb: %s=skip: user locks not checked for leaks, only connections", envMySQLLocks)
	}
	admin := AdminDB(tb, k)
	if err := waitNoLeaks(k.Dialect(), admin, dbs); err != nil {
		tb.Errorf("%v", err)
	}
}

// Leaks is the package-level Leaks for this private server.
func (s *Server) Leaks(dbs ...*sql.DB) error {
	admin, err := s.adminDB()
	if err != nil {
		return err
	}
	return checkLeaks(s.kind.Dialect(), admin, dbs)
}

// AssertNoLeaks is the package-level AssertNoLeaks for this private server.
func (s *Server) AssertNoLeaks(tb testing.TB, dbs ...*sql.DB) {
	tb.Helper()
	admin, err := s.adminDB()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	if err := waitNoLeaks(s.kind.Dialect(), admin, dbs); err != nil {
		tb.Errorf("%v", err)
	}
}

func waitNoLeaks(dialect string, admin *sql.DB, dbs []*sql.DB) error {
	deadline := time.Now().Add(leakTimeout)
	for {
		err := checkLeaks(dialect, admin, dbs)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testdb: still leaking after %v: %w", leakTimeout, err)
		}
		time.Sleep(leakPoll)
	}
}

func checkLeaks(dialect string, admin *sql.DB, dbs []*sql.DB) error {
	var problems []string
	for i, db := range dbs {
		if db == nil {
			continue
		}
		if n := db.Stats().InUse; n != 0 {
			problems = append(problems, fmt.Sprintf("dbs[%d]: %d connection(s) in use (Stats().InUse)", i, n))
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var locks []string
	var err error
	if dialect == "mysql" && os.Getenv(envMySQLLocks) == "skip" {
		// an engine that cannot list its user locks (go-mysql-server),
		// explicitly allowed: only the connections are checked
	} else if dialect == "mysql" {
		locks, err = mysqlUserLocks(ctx, admin)
	} else {
		locks, err = pgAdvisoryLocks(ctx, admin)
	}
	if err != nil {
		return err
	}
	problems = append(problems, locks...)
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "\n"))
}

const pgLocksQuery = `
SELECT coalesce(l.pid, 0), l.classid::int8, l.objid::int8, l.objsubid::int4, l.mode, l.granted,
       coalesce(a.application_name, ''), coalesce(a.state, ''), coalesce(a.query, '')
FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory'
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY l.pid, l.classid, l.objid`

func pgAdvisoryLocks(ctx context.Context, admin *sql.DB) ([]string, error) {
	rows, err := admin.QueryContext(ctx, pgLocksQuery)
	if err != nil {
		return nil, fmt.Errorf("testdb: query pg_locks: %w", err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var (
			pid               int64
			classid, objid    int64
			objsubid          int32
			mode              string
			granted           bool
			app, state, query string
		)
		if err := rows.Scan(&pid, &classid, &objid, &objsubid, &mode, &granted, &app, &state, &query); err != nil {
			return nil, fmt.Errorf("testdb: scan pg_locks: %w", err)
		}
		key := ""
		if objsubid == 1 { // a single bigint key: classid is its high half
			key = fmt.Sprintf(" key=%d", int64(uint64(classid)<<32|uint64(objid)))
		}
		out = append(out, fmt.Sprintf("advisory lock: pid=%d classid=%d objid=%d objsubid=%d%s mode=%s granted=%t application_name=%q state=%q query=%q",
			pid, classid, objid, objsubid, key, mode, granted, app, state, query))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("testdb: read pg_locks: %w", err)
	}
	return out, nil
}

const mysqlLocksQuery = `
SELECT m.THREAD_ID, m.LOCK_MODE, m.LOCK_TYPE, m.TABLE_SCHEMA, m.TABLE_NAME,
       p.USER, p.COMMAND, p.STATE, p.INFO
FROM information_schema.METADATA_LOCK_INFO m
LEFT JOIN information_schema.PROCESSLIST p ON p.ID = m.THREAD_ID
WHERE m.LOCK_TYPE = 'User lock'
ORDER BY m.THREAD_ID`

// mysqlPSLocksQuery is the same for Oracle MySQL 5.7+/8, which lists user
// locks in performance_schema.metadata_locks (the instrument
// wait/lock/metadata/sql/mdl is on by default in 8.0).
const mysqlPSLocksQuery = `
SELECT t.PROCESSLIST_ID, m.LOCK_STATUS, m.OBJECT_TYPE, m.OBJECT_SCHEMA, m.OBJECT_NAME,
       t.PROCESSLIST_USER, t.PROCESSLIST_COMMAND, t.PROCESSLIST_STATE, t.PROCESSLIST_INFO
FROM performance_schema.metadata_locks m
LEFT JOIN performance_schema.threads t ON t.THREAD_ID = m.OWNER_THREAD_ID
WHERE m.OBJECT_TYPE = 'USER LEVEL LOCK'
ORDER BY t.PROCESSLIST_ID`

// mysqlUserLocks lists the user locks (GET_LOCK) of the server: from
// MariaDB's information_schema.METADATA_LOCK_INFO, else from MySQL's
// performance_schema.metadata_locks. A server that has neither (the embedded
// go-mysql-server, Dolt) gets an error that says the locks cannot be listed:
// a leak check that cannot look is a failure, never a pass.
func mysqlUserLocks(ctx context.Context, admin *sql.DB) ([]string, error) {
	rows, err := admin.QueryContext(ctx, mysqlLocksQuery)
	if err != nil {
		var err2 error
		if rows, err2 = admin.QueryContext(ctx, mysqlPSLocksQuery); err2 != nil {
			return nil, fmt.Errorf("testdb: cannot list the server's user locks (GET_LOCK), so no leak check is possible: "+
				"information_schema.METADATA_LOCK_INFO (MariaDB, needs the metadata_lock_info plugin: INSTALL SONAME 'metadata_lock_info'): %v; "+
				"performance_schema.metadata_locks (MySQL, needs performance_schema=ON): %w", err, err2)
		}
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var (
			thread                     sql.NullInt64
			mode, typ, schema, name    sql.NullString
			user, command, state, info sql.NullString
		)
		if err := rows.Scan(&thread, &mode, &typ, &schema, &name, &user, &command, &state, &info); err != nil {
			return nil, fmt.Errorf("testdb: scan METADATA_LOCK_INFO: %w", err)
		}
		out = append(out, fmt.Sprintf("user lock: thread_id=%d lock=%q table_name=%q mode=%s user=%q command=%q state=%q info=%q",
			thread.Int64, schema.String, name.String, mode.String, user.String, command.String, state.String, info.String))
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("testdb: read METADATA_LOCK_INFO: %w", err)
	}
	return out, nil
}
