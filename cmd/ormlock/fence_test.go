package main_test

import (
	"strings"
	"testing"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
)

// ormlock fence advance --by N moves every fencing counter of the
// namespace by N (gormlock.AdvanceFences), and refuses a bad N or a
// missing subcommand with status 2.
func TestFenceAdvance(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		table := ledgerTable(t, k)
		code, _, stderr := runBin(t, k, "migrate", "--ledger-table", table)
		want(t, code, stderr, 0)
		db := openGorm(t, k)
		key := uniq(t, "fence")
		tok := func() int64 {
			t.Helper()
			var got int64
			err := gormlock.Transaction(db, key, func(tx *gorm.DB) error {
				got, _ = gormlock.FencingToken(tx)
				return nil
			}, ormlock.WithFencing(), ormlock.WithLedgerTable(table))
			if err != nil {
				t.Fatal(err)
			}
			return got
		}
		before := tok()
		code, out, stderr := runBin(t, k, "fence", "advance", "--by", "1000000", "--ledger-table", table)
		want(t, code, stderr, 0)
		if !strings.Contains(out, "1 fencing counters") || !strings.Contains(out, "advanced by 1000000") {
			t.Errorf("fence advance said %q", out)
		}
		if after := tok(); after != before+1000001 {
			t.Errorf("token after fence advance --by 1000000: %d, want %d", after, before+1000001)
		}
		for _, args := range [][]string{
			{"fence", "advance", "--ledger-table", table},
			{"fence", "advance", "--by", "-5", "--ledger-table", table},
			{"fence", "--by", "5", "--ledger-table", table},
			{"fence", "retreat", "--by", "5", "--ledger-table", table},
		} {
			code, _, stderr := runBin(t, k, args...)
			want(t, code, stderr, 2)
		}
	})
}
