package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// PGReplication is a PostgreSQL primary with a streaming hot standby, both
// private servers of this package: the standby is a pg_basebackup of the
// primary whose replication connection (primary_conninfo) goes through
// Link, so that a test can freeze or cut the replication alone, and
// clients reach the primary through Front, which a failover points at the
// promoted standby (SwitchFront), the way a virtual IP or a DNS name moves.
// With Sync the primary names the standby in synchronous_standby_names
// and commits with synchronous_commit = on: a commit returns once the
// standby has flushed it. Without it the replication is asynchronous.
type PGReplication struct {
	Primary, Standby *Server
	Link             *Proxy // standby -> primary replication connection
	Front            *Proxy // clients -> the primary, then the promoted standby
	Sync             bool
}

// standbyName is the standby's application_name, which the synchronous
// primary names.
const standbyName = "standby"

// StartPGReplication starts a primary and its standby and waits until the
// standby streams (and, with sync, is the synchronous one). Both are stopped
// and removed in tb.Cleanup. Missing binaries skip the test, or fail it
// under CI.
func StartPGReplication(tb testing.TB, sync bool) *PGReplication {
	tb.Helper()
	return StartPGReplicationWith(tb, PGReplicationConfig{Sync: sync})
}

// PGReplicationConfig says how StartPGReplicationWith starts a primary and
// its standby.
type PGReplicationConfig struct {
	// Sync makes the replication synchronous (see PGReplication).
	Sync bool
	// FakeStandbyClock starts the standby under libfaketime, so that a
	// test sets its clock apart from the primary's (Standby.Clock()), for
	// a promotion to a server whose clock differs.
	FakeStandbyClock bool
}

// StartPGReplicationWith is StartPGReplication with the settings of c.
func StartPGReplicationWith(tb testing.TB, c PGReplicationConfig) *PGReplication {
	tb.Helper()
	sync := c.Sync
	b := findBinaries(Postgres, true)
	if c.FakeStandbyClock && fakeTimeLib() == "" {
		b.missing = append(b.missing, "libfaketime (faketime)")
	}
	if err := b.err(Postgres); err != nil {
		skipOrFail(tb, err)
	}
	basebackup := filepath.Join(filepath.Dir(b.postgres), "pg_basebackup")
	if !isExec(basebackup) {
		skipOrFail(tb, fmt.Errorf("testdb: %s: %w (pg_basebackup next to %s); %s", Postgres, ErrMissingBinaries, b.postgres, installHint))
	}
	r := &PGReplication{Sync: sync}
	// synchronous_commit: the defaults turn it off on the command line,
	// where ALTER SYSTEM cannot override it; synchronous_standby_names is
	// set by ALTER SYSTEM once the standby streams.
	primary, err := newServer(Postgres, b, pgTarget{})
	if err == nil {
		primary.extra = []string{"synchronous_commit=on", "wal_sender_timeout=60s"}
		err = primary.start(false)
	}
	r.Primary = stopAtCleanup(tb, primary, err)
	r.Link = StartProxy(tb, hostPort(r.Primary.Port()))
	standby, err := newServer(Postgres, b, pgTarget{})
	if err == nil && c.FakeStandbyClock {
		err = standby.fakeClock()
	}
	if err == nil {
		err = r.baseBackup(standby, basebackup)
	}
	r.Standby = stopAtCleanup(tb, standby, err)
	r.Front = StartProxy(tb, hostPort(r.Primary.Port()))
	if sync {
		r.Primary.Exec(tb, "ALTER SYSTEM SET synchronous_standby_names = '"+standbyName+"'")
		r.Primary.Exec(tb, "SELECT pg_reload_conf()")
	}
	r.waitStreaming(tb)
	return r
}

// baseBackup makes s a standby of the primary through the link and starts it.
func (r *PGReplication) baseBackup(s *Server, bin string) error {
	data := filepath.Join(s.dir, "data")
	err := runTool(toolTimeout, bin, []string{
		"-D", data, "-h", "127.0.0.1", "-p", strconv.Itoa(r.Link.Port()), "-U", pgSuperuser,
		"-X", "stream", "-c", "fast", "--no-sync",
	}, s.dir, filepath.Join(s.dir, "basebackup.log"), s.cred)
	if err != nil {
		return fmt.Errorf("testdb: standby: %w", err)
	}
	if err := os.WriteFile(filepath.Join(data, "standby.signal"), nil, 0o600); err != nil {
		return err
	}
	if s.cred != nil {
		if err := os.Chown(filepath.Join(data, "standby.signal"), int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return err
		}
	}
	s.extra = []string{
		fmt.Sprintf("primary_conninfo=host=127.0.0.1 port=%d user=%s application_name=%s", r.Link.Port(), pgSuperuser, standbyName),
		"hot_standby=on",
		"wal_receiver_status_interval=1s",
		"synchronous_commit=on",
	}
	s.dataMade, s.dbCreated = true, true
	return s.start(false)
}

// waitStreaming waits up to a minute until the primary lists the standby
// as streaming (and as its synchronous standby with Sync).
func (r *PGReplication) waitStreaming(tb testing.TB) {
	tb.Helper()
	want := "async"
	if r.Sync {
		want = "sync"
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var state, syncState string
		err := r.Primary.DB(tb).QueryRow(
			"SELECT state, sync_state FROM pg_stat_replication WHERE application_name = $1", standbyName).Scan(&state, &syncState)
		if err == nil && state == "streaming" && syncState == want {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testdb: standby not streaming (%s) after 1m: state %q, sync_state %q, err %v; standby log:\n%s",
				want, state, syncState, err, logTail(r.Standby.logPath, 0))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FrontDSN is a pgx URL of database "ormlock" through Front.
func (r *PGReplication) FrontDSN() string { return pgURL(r.Front.Port(), dbName, "") }

// WaitReplayed waits up to 30s until the standby has replayed everything
// the primary has written so far.
func (r *PGReplication) WaitReplayed(tb testing.TB) {
	tb.Helper()
	var lsn string
	if err := r.Primary.DB(tb).QueryRow("SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
		tb.Fatalf("testdb: primary's WAL position: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var ok bool
		err := r.Standby.DB(tb).QueryRow("SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&ok)
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testdb: standby has not replayed %s after 30s (err %v)", lsn, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Promote promotes the standby (pg_promote, what pg_ctl promote does) and
// waits until it accepts writes.
func (r *PGReplication) Promote(tb testing.TB) {
	tb.Helper()
	var ok bool
	if err := r.Standby.DB(tb).QueryRow("SELECT pg_promote(true, 60)").Scan(&ok); err != nil || !ok {
		tb.Fatalf("testdb: pg_promote: %v (returned %v); log:\n%s", err, ok, logTail(r.Standby.logPath, 0))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var rec bool
		if err := r.Standby.DB(tb).QueryRow("SELECT pg_is_in_recovery()").Scan(&rec); err == nil && !rec {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("testdb: standby still in recovery 30s after pg_promote")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SwitchFront points Front at the promoted standby and cuts the
// connections it carried to the old primary: clients reconnect to the new
// one.
func (r *PGReplication) SwitchFront() {
	r.Front.SetUpstream(hostPort(r.Standby.Port()))
	r.Front.Cut()
}

// StopImmediate stops the server at once, as pg_ctl stop -m immediate
// (PostgreSQL: SIGQUIT, no checkpoint, every backend ends) or a crash
// (MariaDB: SIGKILL). The data dir stays; Close removes it.
func (s *Server) StopImmediate(tb testing.TB) {
	tb.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.p == nil {
		return
	}
	p := s.p
	s.p = nil
	sig := syscall.SIGKILL
	if s.kind == Postgres {
		sig = syscall.SIGQUIT
	}
	if err := p.stop(stopStep{sig, 10 * time.Second}); err != nil {
		tb.Logf("testdb: %s: %v", s.kind, err)
	}
}

// DB is a small superuser pool straight to this server (database
// "ormlock"), closed with the server. It fails the test when the pool
// cannot be made.
func (s *Server) DB(tb testing.TB) *sql.DB {
	tb.Helper()
	db, err := s.adminDB()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	return db
}

// Exec runs a statement through DB, failing the test on an error.
func (s *Server) Exec(tb testing.TB, query string, args ...any) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.DB(tb).ExecContext(ctx, query, args...); err != nil {
		tb.Fatalf("testdb: %s: %s: %v", s.kind, query, err)
	}
}

// Addr is the server's "127.0.0.1:port".
func (s *Server) Addr() string { return hostPort(s.port) }
