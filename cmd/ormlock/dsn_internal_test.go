package main

import (
	"strings"
	"testing"
	"time"
)

// mysql:// URLs become go-sql-driver configurations: user, password
// URL-decoded, address with 3306 by default, database, and the driver's own
// parameters; bad ones are usage errors that do not echo the password.
func TestParseMySQLURL(t *testing.T) {
	for _, c := range []struct {
		url, user, pass, addr, db string
		timeout                   time.Duration
		parseTime                 bool
	}{
		{"mysql://app:secret@db.internal:3307/app", "app", "secret", "db.internal:3307", "app", 0, false},
		{"mysql://app:p%40ss%2Fw%3Ard@db/app?parseTime=true&timeout=5s", "app", "p@ss/w:rd", "db:3306", "app", 5 * time.Second, true},
		{"mysql://root@127.0.0.1/", "root", "", "127.0.0.1:3306", "", 0, false},
		{"mysql://u:p@[::1]:3310/x", "u", "p", "[::1]:3310", "x", 0, false},
	} {
		cfg, err := parseMySQLURL(c.url)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		if cfg.User != c.user || cfg.Passwd != c.pass || cfg.Addr != c.addr || cfg.DBName != c.db || cfg.Net != "tcp" ||
			cfg.Timeout != c.timeout || cfg.ParseTime != c.parseTime {
			t.Errorf("%s: user %q pass %q addr %q db %q net %q timeout %v parseTime %v", c.url,
				cfg.User, cfg.Passwd, cfg.Addr, cfg.DBName, cfg.Net, cfg.Timeout, cfg.ParseTime)
		}
	}
	for _, bad := range []string{"mysql://u:s3cr3t@h:notaport/db", "mysql:///db", "mysql://u:s3cr3t@h/db?parseTime=maybe"} {
		_, err := parseMySQLURL(bad)
		if _, ok := err.(*usageError); !ok {
			t.Errorf("%s: %v, want a usage error", bad, err)
			continue
		}
		if strings.Contains(err.Error(), "s3cr3t") {
			t.Errorf("%s: the password shows in %q", bad, err)
		}
	}
}

// A DSN that is none of the accepted forms is a usage error that says what
// --dsn accepts and what was wrong with this one, not the MySQL driver's
// parser error, and never echoes the password.
func TestBadDSN(t *testing.T) {
	for _, c := range []struct{ dsn, says string }{
		{"postgresql//app:s3cr3t@db.internal:5432/app", `starts "postgresql//", which looks like a mistyped postgres:// URL`},
		{"postgres:/app:s3cr3t@db.internal/app", `starts "postgres:/", which looks like a mistyped postgres:// URL`},
		{"mysql//app:s3cr3t@db.internal/app", `starts "mysql//", which looks like a mistyped mysql:// URL`},
		{"mariadb://app:s3cr3t@db.internal/app", `unknown scheme "mariadb://"`},
		{"pgsql://app:s3cr3t@db.internal/app", `unknown scheme "pgsql://"`},
		{"app:s3cr3t@db.internal:3306/app", "its address must be tcp(host:port) or unix(/path/to/socket)"},
		{"app:s3cr3t@tcp(db.internal:3306)app", "no '/' before the database name"},
		{"not a dsn", "no '/' before the database name"},
	} {
		_, _, err := openSQL(c.dsn)
		if _, ok := err.(*usageError); !ok {
			t.Errorf("%s: %v, want a usage error", c.dsn, err)
			continue
		}
		msg := err.Error()
		for _, s := range []string{c.says, "postgres://user:pass@host:5432/db", "host=h port=5432", "mysql://user:pass@host:3306/db", "user:pass@tcp(host:3306)/db"} {
			if !strings.Contains(msg, s) {
				t.Errorf("%s: %q does not say %q", c.dsn, msg, s)
			}
		}
		for _, s := range []string{"s3cr3t", "default addr for network", "invalid DSN"} {
			if strings.Contains(msg, s) {
				t.Errorf("%s: %q shows %q", c.dsn, msg, s)
			}
		}
	}
	// A MySQL DSN whose user is named like a scheme is still one.
	db, srv, err := openSQL("postgres:pw@tcp(127.0.0.1:3306)/db")
	if err != nil {
		t.Fatalf("a MySQL DSN of user postgres: %v", err)
	}
	db.Close() // never connected
	if srv.dialect != "MySQL" {
		t.Errorf("a MySQL DSN of user postgres opens a %s pool", srv.dialect)
	}
}
