package lockproto

import (
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/lib/pq"
)

// connGone's verdict on the errors a COMMIT, ROLLBACK or release can meet:
// a FATAL or PANIC error ends the session whatever its SQLSTATE (the
// servers' own cases: TestFatalEndsTheLock, TestLockLostErrors).
func TestConnGone(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"network", io.ErrUnexpectedEOF, true},
		{"pgpool-II lost its backend", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "XX000", Message: "unable to read data from DB node 0"}, true},
		{"idle in transaction timeout", fmt.Errorf("commit: %w", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "25P03"}), true},
		{"localized FATAL, no unlocalized severity", &pgconn.PgError{Severity: "FATAL", Code: "XX000"}, true},
		{"PANIC", &pgconn.PgError{Severity: "PANIC", SeverityUnlocalized: "PANIC", Code: "XX000"}, true},
		{"administrator command", &pgconn.PgError{Severity: "FATAL", SeverityUnlocalized: "FATAL", Code: "57P01"}, true},
		{"an ERROR, internal", &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "XX000"}, false},
		{"an ERROR, serialization", &pgconn.PgError{Severity: "ERROR", SeverityUnlocalized: "ERROR", Code: "40001"}, false},
		{"lib/pq FATAL", &pq.Error{Severity: "FATAL", Code: "XX000"}, true},
		{"lib/pq ERROR", &pq.Error{Severity: "ERROR", Code: "23505"}, false},
		{"other", errors.New("ormlock: something"), true},
	} {
		if got := connGone(c.err); got != c.want {
			t.Errorf("%s: connGone(%v) = %v, want %v", c.name, c.err, got, c.want)
		}
	}
}
