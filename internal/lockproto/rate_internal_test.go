package lockproto

import (
	"strings"
	"testing"
)

func TestRateVersionVerdict(t *testing.T) {
	for _, c := range []struct {
		version string
		galera  bool
		why     string // "" for none
	}{
		{"10.11.6-MariaDB-0+deb12u1", false, ""},
		{"10.6.0-MariaDB", false, ""},
		{"10.5.23-MariaDB-1:10.5.23+maria~ubu2004", false, "MariaDB 10.5"},
		{"10.4.32-MariaDB-log", false, "10.6 or later"},
		{"8.0.36", false, ""},
		{"8.4.0-commercial", false, ""},
		{"5.7.44-log", false, "MySQL 5.7"},
		{"11.4.2-MariaDB", true, "Galera"},
		{"", false, ""},
	} {
		err := rateVersionVerdict(c.version, c.galera)
		switch {
		case c.why == "" && err != nil:
			t.Errorf("%q (galera %v): %v, want nil", c.version, c.galera, err)
		case c.why != "" && (err == nil || !strings.Contains(err.Error(), c.why)):
			t.Errorf("%q (galera %v): %v, want an error naming %q", c.version, c.galera, err, c.why)
		}
	}
}
