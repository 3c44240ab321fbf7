package lockproto

import (
	"context"
	"database/sql"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/ormlock/ormlock/internal/errs"
)

// Engines that fake some locks and not others, judged by what they are
// (their version, a setting) rather than only by what the lock functions
// answer. CheckServer refuses them with errs.ErrUnsupportedDialect
// before anything is taken (docs/COMPATIBILITY.md, Fake locks; tested on
// their recorded answers, lockproto's TestFakeEngines, since none runs
// here):
//
//   - CockroachDB: its session-level advisory lock functions are no-op
//     stubs on every release so far (v26.3 made the transaction-level ones
//     real), so WithSharedLockConns, which holds session-level locks, is
//     refused there whatever the version; crdbSessionAdvisory is the one
//     value to change the day they are real.
//   - YugabyteDB (version() names "-YB-"): advisory locks exist from 2.25
//     (2025.1 in the new numbering) behind ysql_yb_enable_advisory_locks;
//     an older release raises "not supported" on every lock function,
//     unless yb_silence_advisory_locks_not_supported_error is on, which
//     turns the error into silence: a lock that excludes nobody. Refused
//     below 2.25, and whenever the setting is on.
//   - TiDB (@@version names "-TiDB-"): its GET_LOCK is real (from v5.3), but
//     IS_USED_LOCK may answer 1 instead of the holder's connection id, and
//     the MySQL keepalive of Session, Lead, claim-mode RunOnce and shared
//     lock connections compares it with CONNECTION_ID(): they are refused
//     there (Transaction and RunOnce are not).
//   - PGlite (version() names "PGlite"): one PostgreSQL session in
//     WebAssembly; pglite-socket serves it to many clients at once, which
//     then share its transaction and its session-level locks. Every verb is
//     refused.
//   - A multiplexer of that kind, whatever it says: two connections that
//     announce one backend pid at start-up (BackendKeyData) are one server
//     session. The check's connection (through pgx's database/sql driver)
//     is compared with a second one opened with its settings, to the
//     server it reached, outside the pool and closed at once
//     (PgDriver.ProbePIDs; pgx's, internal/pgxdriver's probePID: nothing
//     else is dialed), on the pool's first check (not on a call
//     nested in a transaction, which asks through that transaction). A
//     direct server announces each backend's own pid, PgBouncer a key of
//     its own per client, so neither matches; a probe that cannot connect
//     judges nothing. Every verb is refused (failover.TestPGliteRefused,
//     on the real pglite-socket).

// leaseAlternative names the lock that works where a server's advisory or
// named locks are refused: a lease, a row per key with an epoch, which
// needs only a table the server replicates and certifies like any other. LeaseAdvice is the sentence the refusals
// end with.
const leaseAlternative = "a lease (ormlock.WithLease(ttl); ormlock run or lead --lease TTL)"

// LeaseAdvice ends the refusals of servers whose advisory or named locks
// exclude nobody while a lease, a row per key, works there: a Galera node,
// a multi-primary Group Replication member, CockroachDB's and YugabyteDB's
// stubs. (A hot standby, a read-only replica and a multiplexed session are
// refused without it: a lease needs a writable primary and a session of
// its own too.)
const LeaseAdvice = "use " + leaseAlternative + ", which works there"

// crdbSessionAdvisory is the first CockroachDB release whose session-level
// advisory lock functions (pg_advisory_lock, pg_advisory_unlock) take real
// locks; {0, 0}: none yet, so session-level paths are refused on every
// release.
var crdbSessionAdvisory = [2]int{0, 0}

// ybAdvisory is the first YugabyteDB release with advisory locks.
var ybAdvisory = [2]int{2, 25}

// ybVersion finds YugabyteDB's release in version()'s answer, such as
// "PostgreSQL 15.2-YB-2.25.2.0-b0 on x86_64-pc-linux-gnu, ...".
var ybVersion = regexp.MustCompile(`-YB-(\d+)\.(\d+)`)

// YBSilenceSetting is the YugabyteDB setting that turns the advisory lock
// functions' "not supported" error into silence.
const YBSilenceSetting = "yb_silence_advisory_locks_not_supported_error"

// IsYugabyte reports whether version() is YugabyteDB's.
func IsYugabyte(version string) bool { return strings.Contains(version, "-YB-") }

// serverFacts is what a genuine answer leaves cached for a pool: the
// refusals of the paths the server fakes while its other locks are real.
type serverFacts struct {
	sessionLocks error // PostgreSQL: session-level advisory locks are not real
	// fakeLocks: the server's own locks exclude nobody (a Galera node, a
	// multi-primary Group Replication member, CockroachDB's stubs), while
	// its tables are written as anywhere: only a lease works there
	fakeLocks error
	keepalive error  // MySQL: the Session keepalive's check cannot work
	product   string // what the server is (ServerProduct), which events carry
	rate      error  // MySQL: Rate's FOR UPDATE SKIP LOCKED is missing or not correct (ratetable.go)
}

// ServerProduct names a server by the version string its check read
// (PostgreSQL's version(), MySQL's @@version), as OpenTelemetry's
// db.system.name does: "postgresql", "cockroachdb", "yugabytedb", "mysql",
// "mariadb" or "tidb".
func ServerProduct(d Dialect, version string) string {
	s, err := ServerOf(d)
	if err != nil {
		return mysqlProduct(version)
	}
	return s.product(version)
}

// postgresProduct is ServerProduct of a PostgreSQL-protocol server.
func postgresProduct(version string) string {
	switch {
	case strings.Contains(version, "CockroachDB"):
		return "cockroachdb"
	case IsYugabyte(version):
		return "yugabytedb"
	}
	return "postgresql"
}

// mysqlProduct is ServerProduct of a MySQL-protocol server.
func mysqlProduct(version string) string {
	switch {
	case strings.Contains(version, "MariaDB"):
		return "mariadb"
	case strings.Contains(version, "TiDB"):
		return "tidb"
	}
	return "mysql"
}

// keepsAlive reports whether o's lock runs the MySQL keepalive, which
// checks that IS_USED_LOCK names the lock connection: a lock held for a
// session (Holding.Session: Session, Lead, RunOnce's claim mode), and
// shared lock connections.
func keepsAlive(o *Op) bool { return o.hold.Session || o.Cfg.SharedConns > 0 }

// PostgresEngineVerdict judges the PostgreSQL-protocol engines of the
// comment above by version() and, on YugabyteDB, the value of
// YBSilenceSetting ("" when unknown): an error wrapping
// errs.ErrUnsupportedDialect when no verb may run, else the facts that
// refuse some paths only.
func PostgresEngineVerdict(version, ybSilence string) (sessionLocks, refused error) {
	if strings.Contains(version, "PGlite") {
		return nil, fmt.Errorf("%w: the server is PGlite (%q): one PostgreSQL session, which a socket server such as pglite-socket shares between all its clients (their transactions and session-level locks with it)", errs.ErrUnsupportedDialect, version)
	}
	if IsYugabyte(version) {
		if isOn(ybSilence) {
			return nil, fmt.Errorf("%w: YugabyteDB with %s on: its advisory lock functions return without taking a lock where they are not supported; %s", errs.ErrUnsupportedDialect, YBSilenceSetting, LeaseAdvice)
		}
		m := ybVersion.FindStringSubmatch(version)
		if m == nil {
			return nil, fmt.Errorf("%w: YugabyteDB of unknown version (%q): advisory locks exist from %d.%d; %s", errs.ErrUnsupportedDialect, version, ybAdvisory[0], ybAdvisory[1], LeaseAdvice)
		}
		major, _ := strconv.Atoi(m[1])
		minor, _ := strconv.Atoi(m[2])
		// 2024.x and later number releases by year
		if major < 2000 && (major < ybAdvisory[0] || (major == ybAdvisory[0] && minor < ybAdvisory[1])) {
			return nil, fmt.Errorf("%w: YugabyteDB %d.%d has no advisory locks (from %d.%d, with ysql_yb_enable_advisory_locks); %s", errs.ErrUnsupportedDialect, major, minor, ybAdvisory[0], ybAdvisory[1], LeaseAdvice)
		}
	}
	if strings.Contains(version, "CockroachDB") {
		m := crdbVersion.FindStringSubmatch(version)
		sessionReal := false
		if m != nil && crdbSessionAdvisory != [2]int{0, 0} {
			major, _ := strconv.Atoi(m[1])
			minor, _ := strconv.Atoi(m[2])
			sessionReal = major > crdbSessionAdvisory[0] || (major == crdbSessionAdvisory[0] && minor >= crdbSessionAdvisory[1])
		}
		if !sessionReal {
			sessionLocks = fmt.Errorf("CockroachDB's session-level advisory lock functions are no-op stubs (only its transaction-level ones are real, from v%d.%d): use a connection of its own per Session, or %s", crdbAdvisory[0], crdbAdvisory[1], leaseAlternative)
		}
	}
	return sessionLocks, nil
}

// MySQLKeepaliveVerdict judges the MySQL keepalive's check on a server of
// @@version version: nil when IS_USED_LOCK names the holder's connection
// (MySQL, MariaDB), else why not (TiDB).
func MySQLKeepaliveVerdict(version string) error {
	if strings.Contains(version, "TiDB") {
		return fmt.Errorf("TiDB (%s): IS_USED_LOCK may answer 1 instead of the holder's connection id, so the keepalive, which compares it with CONNECTION_ID(), cannot tell a held lock from a lost one; Transaction and RunOnce work there, and so does %s", version, leaseAlternative)
	}
	return nil
}

// multiplexerVerdict compares the backend pid conn (a connection of the
// registered driver) announced with the one a second connection, opened
// with conn's settings to conn's server, announces (PgDriver.ProbePIDs):
// one pid means one server session behind both, refused with an error
// wrapping errs.ErrUnsupportedDialect. nil when they differ, and when the
// probe cannot run (another driver, the second connection refused or
// slower than the driver's bound).
func multiplexerVerdict(ctx context.Context, conn *sql.Conn) error {
	pid, other, err := pgDriver.ProbePIDs(ctx, conn)
	if err != nil || pid == 0 || other != pid {
		return nil
	}
	return fmt.Errorf("%w: two connections announced one backend (pid %d): a multiplexer (such as pglite-socket) serves one server session to several clients, which share its transactions and its locks", errs.ErrUnsupportedDialect, pid)
}

// fake refuses o's lock on a server whose own locks exclude nobody,
// unless o's mechanism takes no server lock (a lease: serverLockFree).
func (f *serverFacts) fake(o *Op) error {
	if _, free := o.target.mech.(serverLockFree); free || f.fakeLocks == nil {
		return nil
	}
	return f.fakeLocks
}

// serverLockFree is a Mechanism that takes no lock of the server's own
// (a lease, a row of a table): the server check's fakeLocks does not
// concern it.
type serverLockFree interface{ takesNoServerLock() }

// withoutCluster is vars without what makes a node one of a
// multi-primary cluster, for the verdict on the rest (read-only).
func withoutCluster(vars map[string]string) map[string]string {
	out := make(map[string]string, len(vars))
	for k, v := range vars {
		out[k] = v
	}
	delete(out, "wsrep_on")
	delete(out, "group_replication_single_primary_mode")
	return out
}
