package ormlock_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
)

func TestMigrateSQL(t *testing.T) {
	for _, d := range []string{"postgres", "mysql"} {
		stmts, err := ormlock.MigrateSQL(d, ormlock.WithLedgerTable("runs_x"), ormlock.WithLeaseTable("leases_x"))
		if err != nil {
			t.Fatalf("%s: %v", d, err)
		}
		all := strings.Join(stmts, ";\n")
		for _, want := range []string{"runs_x", "runs_x_fence", "leases_x", "epoch", "expires_at"} {
			if !strings.Contains(all, want) {
				t.Errorf("%s: no %q in\n%s", d, want, all)
			}
		}
		for _, s := range stmts {
			if !strings.HasPrefix(s, "CREATE ") || !strings.Contains(s, " IF NOT EXISTS ") {
				t.Errorf("%s: not a CREATE ... IF NOT EXISTS: %s", d, s)
			}
		}
	}
	if _, err := ormlock.MigrateSQL("sqlite"); !errors.Is(err, ormlock.ErrInvalidArgument) {
		t.Errorf("sqlite: %v, want ErrInvalidArgument", err)
	}
	if _, err := ormlock.MigrateSQL("postgres", ormlock.WithLeaseTable("bad name")); !errors.Is(err, ormlock.ErrInvalidArgument) {
		t.Errorf("bad lease table: %v, want ErrInvalidArgument", err)
	}
}

func TestWithLeaseBounds(t *testing.T) {
	for _, ttl := range []time.Duration{-time.Second, time.Millisecond, 999 * time.Millisecond, 24*time.Hour + 1} {
		if _, err := ormlock.MigrateSQL("postgres", ormlock.WithLease(ttl)); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("WithLease(%v): %v, want ErrInvalidArgument", ttl, err)
		}
	}
	for _, ttl := range []time.Duration{0, time.Second, 24 * time.Hour} {
		if _, err := ormlock.MigrateSQL("postgres", ormlock.WithLease(ttl)); err != nil {
			t.Errorf("WithLease(%v): %v", ttl, err)
		}
	}
}
