package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/keyhash"
)

// Bad invocations get a clear message and status 2 before any lock is taken;
// an unreachable server is ormlock's own error, 70.
func TestUsageErrors(t *testing.T) {
	pgDSN := testdb.DSN(t, testdb.Postgres)
	for _, c := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no command", nil, 2, "Usage:"},
		{"unknown command", []string{"lock"}, 2, `unknown command "lock"`},
		{"unknown first flag", []string{"--verbose"}, 2, `unknown flag "--verbose" before the command`},
		{"missing --", []string{"run", "--dsn", pgDSN, "job", "sleep", "1"}, 2, "missing -- between KEY and COMMAND"},
		{"missing KEY", []string{"run", "--dsn", pgDSN, "--", "true"}, 2, "missing KEY"},
		{"missing COMMAND", []string{"run", "--dsn", pgDSN, "job", "--"}, 2, "missing COMMAND"},
		{"two keys of lead", []string{"lead", "--dsn", pgDSN, "a", "b", "--", "true"}, 2, "one KEY"},
		{"unknown flag", []string{"run", "--bogus", "job", "--", "true"}, 2, "flag provided but not defined: -bogus"},
		{"empty key", []string{"run", "--dsn", pgDSN, "", "--", "true"}, 2, "bad KEY"},
		{"bad id", []string{"run", "--dsn", pgDSN, "id:x", "--", "true"}, 2, "id:N takes a 64-bit integer"},
		{"bad pair", []string{"run", "--dsn", pgDSN, "pair:1", "--", "true"}, 2, "pair:C,O takes two 32-bit integers"},
		{"invalid utf-8", []string{"run", "--dsn", pgDSN, "a\xff", "--", "true"}, 2, "not valid UTF-8"},
		{"bad namespace", []string{"run", "--dsn", pgDSN, "--namespace", "a:b", "job", "--", "true"}, 2, "namespace"},
		{"bad schedule", []string{"run", "--dsn", pgDSN, "--once-per", "0 25 * * *", "job", "--", "true"}, 2, "--once-per"},
		{"not a schedule", []string{"run", "--dsn", pgDSN, "--once-per", "every day", "job", "--", "true"}, 2, "--once-per"},
		{"bad period", []string{"run", "--dsn", pgDSN, "--once-per", "0s", "job", "--", "true"}, 2, "--once-per"},
		{"bad tz", []string{"run", "--dsn", pgDSN, "--once-per", "@daily", "--tz", "Mars/Olympus", "job", "--", "true"}, 2, "unknown time zone"},
		{"tz alone", []string{"run", "--dsn", pgDSN, "--tz", "Europe/Berlin", "job", "--", "true"}, 2, "--tz"},
		{"bad exit code", []string{"run", "--dsn", pgDSN, "--conflict-exit-code", "300", "job", "--", "true"}, 2, "0-255"},
		{"bad keepalive", []string{"run", "--dsn", pgDSN, "--keepalive", "0s", "job", "--", "true"}, 2, "--keepalive"},
		{"short lease", []string{"run", "--dsn", pgDSN, "--lease", "500ms", "job", "--", "true"}, 2, "WithLease: ttl 500ms"},
		{"long lease", []string{"lead", "--dsn", pgDSN, "--lease", "25h", "job", "--", "true"}, 2, "WithLease: ttl 25h0m0s"},
		{"negative lease", []string{"run", "--dsn", pgDSN, "--lease", "-1s", "job", "--", "true"}, 2, "--lease must be"},
		{"lease table name", []string{"holder", "--dsn", pgDSN, "--lease-table", "x y", "job"}, 2, "not a plain identifier"},
		{"dialect without --print", []string{"migrate", "--dialect", "mysql"}, 2, "give --print too"},
		{"unknown dialect", []string{"migrate", "--print", "--dialect", "oracle"}, 2, `"oracle"`},
		{"print without a dialect", []string{"migrate", "--print"}, 2, "--print needs --dialect"},
		{"no DSN", []string{"run", "job", "--", "true"}, 2, "set --dsn or ORMLOCK_DSN"},
		{"bad DSN", []string{"run", "--dsn", "not a dsn", "job", "--", "true"}, 2, "bad DSN"},
		{"bad postgres URL", []string{"run", "--dsn", "postgres://u:s3cr3t-pw@h:99999999/db", "job", "--", "true"}, 2, "bad PostgreSQL DSN"},
		{"bad MySQL DSN", []string{"holder", "--dsn", "root@tcp(127.0.0.1:3306)/db?parseTime=maybe", "job"}, 2, "bad DSN"},
		{"ledger name", []string{"migrate", "--dsn", pgDSN, "--ledger-table", "runs; DROP TABLE x"}, 2, "not a plain identifier"},
		{"command not found", []string{"run", "--dsn", pgDSN, "job", "--", "no-such-command-ormlock"}, 127, "not found"},
		{"postgres unreachable", []string{"run", "--dsn", "postgres://u:s3cr3t-pw@127.0.0.1:1/db?connect_timeout=5", "job", "--", "true"}, 70, "cannot reach the postgres server"},
		{"mysql unreachable", []string{"holder", "--dsn", "u:s3cr3t-pw@tcp(127.0.0.1:1)/db?timeout=5s", "job"}, 70, "cannot reach the MySQL server"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, stderr := runBin(t, "", c.args...)
			want(t, code, stderr, c.code, c.msg)
			if strings.HasPrefix(c.name, "unknown") && len(c.args) == 1 {
				// A short error and a hint, not the whole usage.
				want(t, code, stderr, c.code, "see ormlock help")
				if n := strings.Count(stderr, "\n"); n > 3 || strings.Contains(stderr, "Usage:") {
					t.Errorf("%d lines on stderr, the usage among them:\n%s", n, stderr)
				}
			}
			if out != "" {
				t.Errorf("stdout %q", out)
			}
			if strings.Contains(stderr, "s3cr3t-pw") {
				t.Errorf("the password shows in %q", stderr)
			}
			for _, line := range strings.Split(stderr, "\n") {
				if strings.Count(line, "ormlock: ") > 1 {
					t.Errorf("\"ormlock: \" twice in %q", line)
				}
			}
		})
	}
	// A bad value in a flag's variable is a usage error naming it.
	p := startWith(t, "", func(c *exec.Cmd) { c.Env = append(c.Env, "ORMLOCK_CONNECT_TIMEOUT=soon") }, "holder", "--dsn", pgDSN, "job")
	want(t, p.wait(t, time.Minute), p.stderr.String(), 2, "$ORMLOCK_CONNECT_TIMEOUT", `"soon"`, "--connect-timeout")
	testdb.AssertNoLeaks(t, testdb.Postgres)
}

// ormlock --version (and version) prints the module version on stdout.
func TestVersion(t *testing.T) {
	for _, args := range [][]string{{"--version"}, {"version"}, {"-version"}} {
		code, out, stderr := runBin(t, "", args...)
		want(t, code, stderr, 0)
		// go build in a work tree records "(devel)"; go install of a
		// release its version.
		if !regexp.MustCompile(`^ormlock (\(devel\)|v\d+\.\d+\.\d+\S*)( [0-9a-f]{12})? \(go\S+\)\n$`).MatchString(out) {
			t.Errorf("%q: stdout %q", args, out)
		}
	}
	code, _, stderr := runBin(t, "", "version", "extra")
	want(t, code, stderr, 2, "takes no arguments")
}

// --help of each command prints its usage and examples on stdout, status 0.
func TestHelp(t *testing.T) {
	for _, args := range [][]string{
		{"--help"}, {"help"}, {"run", "--help"}, {"help", "run"}, {"holder", "-h"}, {"runs", "--help"}, {"key", "--help"}, {"migrate", "--help"}, {"lead", "--help"}, {"help", "version"},
	} {
		code, out, stderr := runBin(t, "", args...)
		want(t, code, stderr, 0)
		if !strings.Contains(out, "Usage") || !strings.Contains(out, "Examples") && !strings.Contains(out, "Exit statuses") {
			t.Errorf("%q: %s", args, out)
		}
	}
	_, out, _ := runBin(t, "", "holder", "--help")
	if strings.Contains(out, "query=") {
		t.Errorf("holder --help shows a query, which holder never prints:\n%s", out)
	}
	_, out, _ = runBin(t, "", "--help")
	for _, s := range []string{"75", "76", "77", "70", "simple_protocol"} {
		if !strings.Contains(out, s) {
			t.Errorf("ormlock --help does not mention %s", s)
		}
	}
}

// ormlock key prints keyhash's values, and its psql expression computes the
// same bigint on PostgreSQL, with and without a namespace.
func TestKey(t *testing.T) {
	admin := testdb.AdminDB(t, testdb.Postgres)
	line := regexp.MustCompile(`(?m)^(\S+)\s+(.*)$`)
	for _, c := range []struct{ ns, name string }{
		{"", "daily-settlement"}, {"billing", "daily-settlement"}, {"", "it's, \"quoted\""}, {"ns'x", "Grüße-日本"},
	} {
		args := []string{"key", c.name}
		if c.ns != "" {
			args = []string{"key", "--namespace", c.ns, c.name}
		}
		code, out, stderr := runBin(t, "", args...)
		want(t, code, stderr, 0)
		fields := map[string]string{}
		for _, m := range line.FindAllStringSubmatch(out, -1) {
			fields[m[1]] = m[2]
		}
		if got, w := fields["int64"], strconv.FormatInt(keyhash.Int64NS(c.ns, c.name), 10); got != w {
			t.Errorf("%q: int64 %q, want %s", c.name, got, w)
		}
		if got, w := fields["mysql"], keyhash.MySQLName(c.ns, c.name); got != w {
			t.Errorf("%q: mysql %q, want %q", c.name, got, w)
		}
		cl, ob := keyhash.Pair(c.ns, c.name)
		if w := strconv.Itoa(int(cl)) + "," + strconv.Itoa(int(ob)); !strings.HasPrefix(fields["pair"], w) {
			t.Errorf("%q: pair %q, want %s", c.name, fields["pair"], w)
		}
		var v int64
		if err := admin.QueryRowContext(context.Background(), strings.TrimSuffix(fields["psql"], ";")).Scan(&v); err != nil {
			t.Fatalf("%q: psql %q: %v", c.name, fields["psql"], err)
		}
		if v != keyhash.Int64NS(c.ns, c.name) {
			t.Errorf("%q: psql gives %d, want %d", c.name, v, keyhash.Int64NS(c.ns, c.name))
		}
	}
	code, out, stderr := runBin(t, "", "key", "id:-5")
	want(t, code, stderr, 0)
	if !strings.Contains(out, "int64     -5") || !strings.Contains(out, "classid=4294967295 objid=4294967291 objsubid=1") {
		t.Errorf("key id:-5:\n%s", out)
	}
}

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
