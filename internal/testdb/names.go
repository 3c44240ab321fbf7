package testdb

import (
	"fmt"
	"testing"
	"time"

	"github.com/ormlock/ormlock/keyhash"
)

// Slot returns a distinct, deterministic RunOnce slot per index i: i hours
// after 2030-01-01 00:00 UTC.
func Slot(i int) time.Time {
	return time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Hour)
}

// TableName returns the test's own table name: prefix, "_", and the 16 hex
// digits of the keyhash of the test's name (a valid identifier on every
// server, distinct per test and prefix).
func TableName(tb testing.TB, prefix string) string {
	return fmt.Sprintf("%s_%016x", prefix, uint64(keyhash.Int64(tb.Name())))
}

// Table returns TableName(tb, prefix) and drops that table, and the fence,
// controls and actions tables a ledger of that name gets (name +
// "_fence", "_controls", "_actions"), on the shared server
// of kind k when the test ends. The caller creates it.
func Table(tb testing.TB, k Kind, prefix string) string {
	tb.Helper()
	name := TableName(tb, prefix)
	tb.Cleanup(func() {
		admin := AdminDB(tb, k)
		_, _ = admin.Exec("DROP TABLE IF EXISTS " + name)
		_, _ = admin.Exec("DROP TABLE IF EXISTS " + name + "_fence")
		_, _ = admin.Exec("DROP TABLE IF EXISTS " + name + "_controls")
		_, _ = admin.Exec("DROP TABLE IF EXISTS " + name + "_actions")
	})
	return name
}
