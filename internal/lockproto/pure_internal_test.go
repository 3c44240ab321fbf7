package lockproto

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"

	"github.com/ormlock/ormlock"
)

// Table tests of the small pure classifiers the protocols branch on.

func TestSnapshotIsolation(t *testing.T) {
	for level, want := range map[sql.IsolationLevel]bool{
		sql.LevelDefault:         false,
		sql.LevelReadUncommitted: false,
		sql.LevelReadCommitted:   false,
		sql.LevelWriteCommitted:  false,
		sql.LevelRepeatableRead:  true,
		sql.LevelSnapshot:        true,
		sql.LevelSerializable:    true,
		sql.LevelLinearizable:    true,
	} {
		if got := SnapshotIsolation(&sql.TxOptions{Isolation: level}); got != want {
			t.Errorf("SnapshotIsolation(%v) = %v", level, got)
		}
	}
	if SnapshotIsolation(nil) {
		t.Error("SnapshotIsolation(nil) = true: no options is the server's default, READ COMMITTED")
	}
}

// After a clean "held elsewhere" the connection goes back to the pool;
// after anything else its state is unknown.
func TestCleanNotAcquired(t *testing.T) {
	for _, c := range []struct {
		name string
		err  error
		want bool
	}{
		{"held elsewhere", fmt.Errorf("%w: held", ormlock.ErrNotAcquired), true},
		{"wait cut by the deadline", fmt.Errorf("%w: %w", ormlock.ErrNotAcquired, context.DeadlineExceeded), false},
		{"cancelled", fmt.Errorf("%w: %w", ormlock.ErrNotAcquired, context.Canceled), false},
		{"another error", errors.New("broken pipe"), false},
	} {
		if got := cleanNotAcquired(c.err); got != c.want {
			t.Errorf("%s: cleanNotAcquired = %v, want %v", c.name, got, c.want)
		}
	}
}

// completion_type is set back as one of its names, quoted; anything
// unknown as the default.
func TestMySQLCompletionType(t *testing.T) {
	for ct, want := range map[string]string{
		"CHAIN": "'CHAIN'", "RELEASE": "'RELEASE'", "1": "'1'", "2": "'2'",
		"NO_CHAIN": "'NO_CHAIN'", "0": "'NO_CHAIN'", "": "'NO_CHAIN'", "'; DROP TABLE x; --": "'NO_CHAIN'",
	} {
		if got := mysqlCompletionType(ct); got != want {
			t.Errorf("mysqlCompletionType(%q) = %s, want %s", ct, got, want)
		}
	}
}
