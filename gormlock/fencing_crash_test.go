package gormlock_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// TestFencingCrash is the durability case: holders take tokens and roll
// back (a rolled-back holder may have used its token outside the database),
// the server is killed with SIGKILL at once and restarted, and the next
// holder's token is greater than every token handed out before the crash.
//
// The test servers run with synchronous_commit=off (PostgreSQL), which the
// issuance overrides for its own transaction, and MariaDB with
// innodb_flush_log_at_trx_commit=0, which no session can override: the test
// sets it to 1, the default and what fencing requires (docs/PROTOCOL.md).
func TestFencingCrash(t *testing.T) {
	for _, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			s := testdb.Start(t, k)
			db, sqlDB, admin := openPrivate(t, s, "")
			target := s // the server that runs the SQL
			if k == testdb.PgBouncer {
				target = s.Backend()
			}
			if k.Dialect() == "mysql" {
				if _, err := admin.Exec("SET GLOBAL innodb_flush_log_at_trx_commit = 1"); err != nil {
					t.Fatal(err)
				}
			}
			tbl := fenceLedger(t, k, db)
			key := "fence-crash"
			errFail := errors.New("roll back")
			var last int64
			for i := range 50 {
				err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
					tok, _ := gormlock.FencingToken(tx)
					if tok <= last {
						t.Errorf("token %d after %d", tok, last)
					}
					last = tok
					return errFail
				}, tbl, ormlock.WithFencing())
				if !errors.Is(err, errFail) {
					t.Fatalf("holder %d: %v", i, err)
				}
			}
			crash(t, k.Dialect(), admin)
			target.Restart(t)
			sqlDB.SetMaxIdleConns(0) // drop the pool's broken connections
			sqlDB.SetMaxIdleConns(2)
			var after int64
			deadline := time.Now().Add(30 * time.Second)
			for {
				err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
					after, _ = gormlock.FencingToken(tx)
					return nil
				}, tbl, ormlock.WithFencing())
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("after restart: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if after <= last {
				t.Fatalf("token after the crash %d, not greater than %d, handed out before it", after, last)
			}
			t.Logf("last token before SIGKILL %d, first after restart %d", last, after)
		})
	}
}

// crash SIGKILLs the server admin is connected to: PostgreSQL's postmaster
// and all its children (so no backend outlives it to flush anything), or
// mariadbd. The test runs as the user that started the servers.
func crash(t *testing.T, dialect string, admin *sql.DB) {
	t.Helper()
	var pidFile string
	if dialect == "postgres" {
		var dir string
		if err := admin.QueryRow("SHOW data_directory").Scan(&dir); err != nil {
			t.Fatal(err)
		}
		pidFile = filepath.Join(dir, "postmaster.pid")
	} else if err := admin.QueryRow("SELECT @@pid_file").Scan(&pidFile); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(pidFile)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0]))
	if err != nil {
		t.Fatalf("pid file %s: %v", pidFile, err)
	}
	_ = admin.Close()
	children := childrenOf(pid)
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL %d: %v", pid, err)
	}
	for _, c := range children {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
	for _, p := range append(children, pid) { // wait until they are gone (or zombies)
		for i := 0; i < 100; i++ {
			st, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/stat")
			if err != nil || strings.Contains(string(st), ") Z ") {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// childrenOf lists the processes whose parent is pid (Linux /proc).
func childrenOf(pid int) []int {
	var out []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		c, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may contain spaces and ')'
		rest := string(st[strings.LastIndexByte(string(st), ')')+1:])
		f := strings.Fields(rest)
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, c)
		}
	}
	return out
}
