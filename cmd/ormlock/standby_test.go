package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ormlock/ormlock/internal/testdb"
)

// Every command that talks to the database, pointed at a PostgreSQL hot
// standby, is refused before COMMAND runs, with an error naming the
// standby: run (a lock, and --once-per), lead, holder, runs and migrate.
func TestStandbyRefusedCommands(t *testing.T) {
	primary := testdb.Start(t, testdb.Postgres)
	standby := primary.StartStandby(t)
	dsn := "--dsn=" + standby.DSN()
	marker := filepath.Join(t.TempDir(), "ran")
	cmd := []string{"--", "sh", "-c", "touch " + marker}
	for _, c := range []struct {
		name string
		args []string
	}{
		{"run", append([]string{"run", dsn, "standby-key"}, cmd...)},
		{"run --once-per", append([]string{"run", dsn, "--once-per", "1h", "standby-job"}, cmd...)},
		{"lead", append([]string{"lead", dsn, "standby-lead"}, cmd...)},
		{"holder", []string{"holder", dsn, "standby-key"}},
		{"runs", []string{"runs", dsn, "standby-job"}},
		{"migrate", []string{"migrate", dsn}},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, _, stderr := runBin(t, "", c.args...)
			t.Logf("exit %d: %s", code, strings.TrimSpace(stderr))
			if code == 0 || !strings.Contains(stderr, "hot standby") {
				t.Errorf("ormlock %s on a standby: exit %d, stderr:\n%s\nwant a failure naming the hot standby", c.name, code, stderr)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatalf("ormlock %s on a standby ran COMMAND", c.name)
			}
		})
	}
}
