package main_test

import (
	"fmt"
	"net"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/testdb"
)

// COMMAND's environment: no ORMLOCK_DSN unless --export-dsn (then the DSN
// ormlock used, even one given as --dsn); PG* and MYSQL_PWD pass through;
// the lock's variables are there, the supervisor's marker is not.
func TestRunEnvironment(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Parallel() // one server each
		key := uniq(t, "env")
		script := `echo "dsn=${ORMLOCK_DSN-unset} pg=$PGPASSWORD my=$MYSQL_PWD key=$ORMLOCK_KEY ns=$ORMLOCK_NAMESPACE sup=${ORMLOCK_SUPERVISOR-unset}"`
		withVars := func(c *exec.Cmd) {
			c.Env = append(c.Env, "PGPASSWORD=pgpw", "MYSQL_PWD=mypw", "ORMLOCK_NAMESPACE=envns")
		}
		p := startWith(t, k, withVars, "run", key, "--", "sh", "-c", script)
		want(t, p.wait(t, time.Minute), p.stderr.String(), 0)
		if got, w := p.stdout.String(), "dsn=unset pg=pgpw my=mypw key="+key+" ns=envns sup=unset\n"; got != w {
			t.Errorf("COMMAND's environment: %q, want %q", got, w)
		}
		dsn := testdb.DSN(t, k)
		p = startWith(t, "", withVars, "run", "--dsn", dsn, "--export-dsn", "--namespace", "flagns", key, "--", "sh", "-c", script)
		want(t, p.wait(t, time.Minute), p.stderr.String(), 0)
		if got, w := p.stdout.String(), "dsn="+dsn+" pg=pgpw my=mypw key="+key+" ns=flagns sup=unset\n"; got != w {
			t.Errorf("COMMAND's environment with --export-dsn: %q, want %q", got, w)
		}
	})
}

// $ORMLOCK_NAMESPACE is the default of --namespace for every command, and
// holder and runs that find nothing say on stderr where they looked.
func TestNamespaceVariable(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Parallel() // one server each
		key := uniq(t, "ns")
		inNS := func(c *exec.Cmd) { c.Env = append(c.Env, "ORMLOCK_NAMESPACE=envns") }
		g, waitFor := gate(t)
		p := startWith(t, k, inNS, "run", key, "--", "sh", "-c", "echo started; "+waitFor)
		p.waitOutput(t, "started", time.Minute)
		if testdb.RawFree(t, k, "envns", key) {
			t.Errorf("the lock is not taken in $ORMLOCK_NAMESPACE")
		}
		h := startWith(t, k, inNS, "holder", key)
		want(t, h.wait(t, time.Minute), h.stderr.String(), 0)
		if !strings.HasPrefix(h.stdout.String(), "held pid=") {
			t.Errorf("holder in $ORMLOCK_NAMESPACE: %q", h.stdout)
		}
		code, out, stderr := runBin(t, k, "holder", key)
		want(t, code, stderr, 0, "is free without a namespace", "ORMLOCK_NAMESPACE")
		if out != "free\n" {
			t.Errorf("holder outside the namespace: %q", out)
		}
		code, out, stderr = runBin(t, k, "holder", "--namespace", "other", key)
		want(t, code, stderr, 0, `is free in namespace "other"`)
		if out != "free\n" {
			t.Errorf("holder in another namespace: %q", out)
		}
		letGo(t, g)
		want(t, p.wait(t, time.Minute), p.stderr.String(), 0)

		table := ledgerTable(t, k)
		code, _, stderr = runBin(t, k, "migrate", "--ledger-table", table)
		want(t, code, stderr, 0)
		r := startWith(t, k, func(c *exec.Cmd) { inNS(c); c.Env = append(c.Env, "ORMLOCK_LEDGER_TABLE="+table) }, "runs", key)
		want(t, r.wait(t, time.Minute), r.stderr.String(), 0, "no runs of", "in ledger table "+table+` in namespace "envns"`)
	})
}

// A server that accepts connections and never answers fails after
// --connect-timeout (or $ORMLOCK_CONNECT_TIMEOUT), saying so.
func TestConnectTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		var conns []net.Conn // held open, never written to
		defer func() {
			for _, c := range conns {
				c.Close()
			}
		}()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	addr := ln.Addr().String()
	for _, c := range []struct {
		name, dsn, env string
	}{
		{"postgres", "postgres://u:s3cr3t-pw@" + addr + "/db", ""},
		{"mysql URL", "mysql://u:s3cr3t-pw@" + addr + "/db", ""},
		{"mysql DSN", "u:s3cr3t-pw@tcp(" + addr + ")/db", "ORMLOCK_CONNECT_TIMEOUT=1s"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			args := []string{"holder", "--dsn", c.dsn, "key"}
			if c.env == "" {
				args = append(args, "--connect-timeout", "1s")
			}
			p := startWith(t, "", func(cmd *exec.Cmd) { cmd.Env = append(cmd.Env, c.env) }, args...)
			code := p.wait(t, 30*time.Second)
			want(t, code, p.stderr.String(), 70, "cannot reach the", "at "+addr, "timed out after 1s")
			if strings.Contains(p.stderr.String(), "s3cr3t-pw") {
				t.Errorf("the password shows in %q", p.stderr)
			}
		})
	}
}

// A missing database or role, or a wrong password, is reported as the
// server's refusal, not as an unreachable server; mysql:// URLs work, their
// password URL-decoded.
func TestConnectRefused(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		t.Parallel() // one server each
		u := dsnURL(t, k)
		noDB := *u
		noDB.Path = "/no_such_db_ormlock"
		cases := []struct{ name, dsn, msg string }{{"no database", noDB.String(), "no_such_db_ormlock"}}
		if k == testdb.Postgres {
			noRole := *u
			noRole.User = url.User("no_such_role_ormlock")
			cases = append(cases, struct{ name, dsn, msg string }{"no role", noRole.String(), "no_such_role_ormlock"})
		}
		if k == testdb.MariaDB {
			admin := testdb.AdminDB(t, k)
			const pw = "p@ss/w:rd?#"
			for _, q := range []string{
				"CREATE USER IF NOT EXISTS 'ormlock_url'@'%' IDENTIFIED BY '" + pw + "'",
				"CREATE USER IF NOT EXISTS 'ormlock_url'@'localhost' IDENTIFIED BY '" + pw + "'",
				"GRANT SELECT ON `" + strings.TrimPrefix(u.Path, "/") + "`.* TO 'ormlock_url'@'%'",
				"GRANT SELECT ON `" + strings.TrimPrefix(u.Path, "/") + "`.* TO 'ormlock_url'@'localhost'",
			} {
				if _, err := admin.Exec(q); err != nil {
					t.Fatal(err)
				}
			}
			t.Cleanup(func() {
				_, _ = admin.Exec("DROP USER IF EXISTS 'ormlock_url'@'%'")
				_, _ = admin.Exec("DROP USER IF EXISTS 'ormlock_url'@'localhost'")
			})
			good := *u
			good.User = url.UserPassword("ormlock_url", pw)
			key := uniq(t, "url")
			code, out, stderr := runBin(t, "", "run", "--dsn", good.String(), key, "--", "echo", "ran")
			want(t, code, stderr, 0)
			if out != "ran\n" {
				t.Errorf("run over a mysql:// URL: %q", out)
			}
			bad := *u
			bad.User = url.UserPassword("ormlock_url", "wrong-pw")
			cases = append(cases, struct{ name, dsn, msg string }{"wrong password", bad.String(), "Access denied"})
		}
		for _, c := range cases {
			code, _, stderr := runBin(t, "", "holder", "--dsn", c.dsn, "key")
			want(t, code, stderr, 70, "refused the connection", c.msg)
			if strings.Contains(stderr, "cannot reach") {
				t.Errorf("%s: reported as unreachable: %s", c.name, stderr)
			}
		}
	})
}

// dsnURL returns the test server's DSN as a URL: postgres:// as it is, the
// MariaDB one as the mysql:// URL of the same server.
func dsnURL(t *testing.T, k testdb.Kind) *url.URL {
	t.Helper()
	dsn := testdb.DSN(t, k)
	if k.Dialect() == "postgres" {
		u, err := url.Parse(dsn)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	// root@tcp(127.0.0.1:PORT)/DB?PARAMS
	var user, addr, rest string
	if i := strings.Index(dsn, "@tcp("); i >= 0 {
		user, rest = dsn[:i], dsn[i+len("@tcp("):]
	}
	addr, rest, _ = strings.Cut(rest, ")/")
	db, query, _ := strings.Cut(rest, "?")
	u, err := url.Parse(fmt.Sprintf("mysql://%s@%s/%s?%s", user, addr, db, query))
	if err != nil {
		t.Fatal(err)
	}
	return u
}
