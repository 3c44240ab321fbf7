package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

// The example runs in make test on its embedded default and on the real
// servers of internal/testdb.
func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// runExample runs the program with args and asserts that the stale write
// was refused.
func runExample(t *testing.T, args ...string) {
	t.Helper()
	args = append([]string{"-key", "fencing-test-" + strings.ReplaceAll(t.Name(), "/", "-")}, args...)
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := run(ctx, args, &stdout, &stderr)
	t.Logf("fencing %s:\n%s%s", strings.Join(args, " "), stdout.String(), stderr.String())
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "refused: the stale holder's write") {
		t.Fatalf("last line %q", last)
	}
}

func TestFencing(t *testing.T) {
	t.Run("embedded", func(t *testing.T) { runExample(t) })
	for _, k := range testdb.Kinds() {
		t.Run(string(k), func(t *testing.T) {
			dsn := testdb.DSN(t, k)
			t.Cleanup(func() {
				testdb.AssertNoLeaks(t, k)
				_, _ = testdb.AdminDB(t, k).Exec("DROP TABLE IF EXISTS fencing_accounts")
			})
			runExample(t, "-dsn", dsn)
		})
	}
}

func TestFlags(t *testing.T) {
	for _, args := range [][]string{{"-keepalive", "0s"}, {"extra"}} {
		var out bytes.Buffer
		if err := run(context.Background(), args, &out, &out); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
}
