package testdb

import (
	"io"
	"os"
	"strings"
	"testing"
)

// LogOffset returns the current size of the PostgreSQL log of kind k, or -1
// when there is no log to read (MariaDB, or a DSN from the environment).
func LogOffset(tb testing.TB, k Kind) int64 {
	tb.Helper()
	if k.Dialect() != "postgres" {
		return -1
	}
	p := LogPath(tb, k)
	if p == "" {
		return -1
	}
	st, err := os.Stat(p)
	if err != nil {
		tb.Fatalf("stat server log: %v", err)
	}
	return st.Size()
}

// LogLines returns the lines of the PostgreSQL log of kind k written since
// off (from LogOffset) that contain needle.
func LogLines(tb testing.TB, k Kind, off int64, needle string) []string {
	tb.Helper()
	f, err := os.Open(LogPath(tb, k))
	if err != nil {
		tb.Fatalf("open server log: %v", err)
	}
	defer f.Close()
	if _, err := f.Seek(off, io.SeekStart); err != nil {
		tb.Fatal(err)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		tb.Fatal(err)
	}
	var out []string
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.Contains(line, needle) {
			out = append(out, line)
		}
	}
	return out
}

// AssertNoDuplicateKeyLogged fails the test when the PostgreSQL log of kind
// k has a duplicate-key error since off (a no-op when off < 0): RunOnce must
// claim ledger rows without provoking one.
func AssertNoDuplicateKeyLogged(tb testing.TB, k Kind, off int64) {
	tb.Helper()
	if off < 0 {
		return
	}
	if lines := LogLines(tb, k, off, "duplicate key"); len(lines) > 0 {
		tb.Fatalf("server log has %d duplicate-key error(s), e.g.\n%s", len(lines), lines[0])
	}
}
