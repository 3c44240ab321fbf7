package gormlock_test

import (
	"os"
	"strconv"
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/internal/testdb/gormtest"
)

// TestCalls makes ORMLOCK_CALLS (default 1) gormlock.Transaction calls on
// PostgreSQL with the pgx driver, READ COMMITTED, no option, an empty fn:
// scripts/files-crossed runs it under coverage with one call and with two
// to list the files a warm call crosses (internal/lockproto/doc.go).
func TestCalls(t *testing.T) {
	n := 1
	if s := os.Getenv("ORMLOCK_CALLS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n < 1 {
			t.Fatalf("ORMLOCK_CALLS=%q: want a positive number", s)
		}
	}
	db := gormtest.On(t, "postgres", testdb.Open(t, testdb.Postgres))
	for range n {
		if err := gormlock.Transaction(db, "ormlock-calls", func(*gorm.DB) error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
}
