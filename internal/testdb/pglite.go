package testdb

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// envPGliteServer names pglite-socket's server script (scripts/fetch-pglite
// prints it); without it StartPGlite looks in fetch-pglite's cache.
const envPGliteServer = "ORMLOCK_PGLITE_SERVER"

// pgliteServer finds pglite-socket's server script: $ORMLOCK_PGLITE_SERVER,
// else the newest copy in scripts/fetch-pglite's cache.
func pgliteServer() string {
	if p := os.Getenv(envPGliteServer); p != "" {
		return p
	}
	cache := os.Getenv("ORMLOCK_PGLITE_CACHE")
	if cache == "" {
		cache = "/var/cache/ormlock/pglite"
		if os.Geteuid() != 0 {
			if home, err := os.UserHomeDir(); err == nil {
				cache = filepath.Join(home, ".cache/ormlock/pglite")
			}
		}
	}
	m, _ := filepath.Glob(filepath.Join(cache, "*/node_modules/@electric-sql/pglite-socket/dist/scripts/server.js"))
	if len(m) == 0 {
		return ""
	}
	return m[len(m)-1]
}

// StartPGlite starts pglite-socket (npm @electric-sql/pglite-socket, on the
// machine's Node) on a free loopback port, serving one in-memory PGlite
// database to up to maxConns clients at once, and returns a pgx DSN of it.
// It is stopped in tb.Cleanup. A missing node or package skips the test
// (fails it under CI) naming scripts/fetch-pglite, which make deps runs.
func StartPGlite(tb testing.TB, maxConns int) string {
	tb.Helper()
	node, server := lookBin("node"), pgliteServer()
	var missing []string
	if node == "" {
		missing = append(missing, "node")
	}
	if server == "" || !isFile(server) {
		missing = append(missing, "pglite-socket (run scripts/fetch-pglite)")
	}
	if len(missing) > 0 {
		skipOrFail(tb, fmt.Errorf("testdb: pglite: %w (%v)", ErrMissingBinaries, missing))
	}
	dir := tb.TempDir()
	port, err := FreePort()
	if err != nil {
		tb.Fatalf("testdb: pglite: free port: %v", err)
	}
	logPath := filepath.Join(dir, "pglite.log")
	p, err := startProc(node, []string{server, "--host=127.0.0.1", "--port=" + strconv.Itoa(port),
		"--max-connections=" + strconv.Itoa(maxConns)}, dir, logPath, nil)
	if err != nil {
		tb.Fatalf("testdb: pglite: %v", err)
	}
	tb.Cleanup(func() { _ = p.stop(stopStep{syscall.SIGTERM, 5 * time.Second}) })
	dsn := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", port)
	// Ready when the server says it listens, read from its log: a client
	// connection to find out would take the one slot of a one-client
	// server (--max-connections=1), which it frees only some time after
	// the client's Terminate, resetting the next client meanwhile.
	deadline := time.Now().Add(readyTimeout)
	for {
		if b, _ := os.ReadFile(logPath); bytes.Contains(b, []byte("PGLiteSocketServer listening")) {
			return dsn
		}
		if p.exited() || time.Now().After(deadline) {
			tb.Fatalf("testdb: pglite not ready; log:\n%s", logTail(logPath, 0))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}
