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
