package testdb

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// recTB records Skipf/Fatalf instead of stopping the test.
type recTB struct {
	testing.TB
	skipped, fatal string
}

func (r *recTB) Helper()                   {}
func (r *recTB) Skipf(f string, a ...any)  { r.skipped = fmt.Sprintf(f, a...) }
func (r *recTB) Fatalf(f string, a ...any) { r.fatal = fmt.Sprintf(f, a...) }
func (r *recTB) outcome() (string, string) { return r.skipped, r.fatal }

func TestSkipOrFail(t *testing.T) {
	missing := findBinaries(MariaDB, false)
	missing.missing = []string{"mariadbd"}
	errMissing := missing.err(MariaDB)
	if !errors.Is(errMissing, ErrMissingBinaries) || !strings.Contains(errMissing.Error(), "apt-get install -y postgresql pgbouncer mariadb-server") {
		t.Fatalf("missing-binaries error: %v", errMissing)
	}

	t.Setenv("CI", "")
	r := &recTB{TB: t}
	skipOrFail(r, errMissing)
	if s, f := r.outcome(); s == "" || f != "" {
		t.Errorf("without CI: skipped %q, fatal %q; want a skip", s, f)
	}

	t.Setenv("CI", "true")
	r = &recTB{TB: t}
	skipOrFail(r, errMissing)
	if s, f := r.outcome(); s != "" || !strings.Contains(f, "apt-get install") {
		t.Errorf("with CI: skipped %q, fatal %q; want a failure naming the install command", s, f)
	}

	t.Setenv("CI", "")
	r = &recTB{TB: t}
	skipOrFail(r, errors.New("boom"))
	if s, f := r.outcome(); s != "" || f != "boom" {
		t.Errorf("other error: skipped %q, fatal %q; want a failure", s, f)
	}
}

func TestIniQuote(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1": "127.0.0.1",
		"":          "''",
		"a b":       "'a b'",
		`it's\`:     `'it\'s\\'`,
	} {
		if got := iniQuote(in); got != want {
			t.Errorf("iniQuote(%q) = %q, want %q", in, got, want)
		}
	}
}
