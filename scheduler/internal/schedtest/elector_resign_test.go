package schedtest_test

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/scheduler"
	"github.com/ormlock/ormlock/scheduler/gormsched"
)

// Two Electors: the one that leads from start-up, asked to step down
// (gormlock.Act with ormlock.Resign), stops leading within one keepalive
// interval and a margin, the other takes over, and the error handler
// hears who asked; when the new leader closes, the resigned one leads
// again only once its cooldown has passed.
func TestElectorResign(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		const keepalive = 200 * time.Millisecond
		const cooldown = 2 * time.Second
		const margin = 2 * time.Second
		key := "resign:" + jobName(t)
		tbl := testdb.Table(t, k, "c")
		opts := []ormlock.Option{ormlock.WithLedgerTable(tbl), ormlock.WithKeepalive(keepalive)}
		db := openGorm(t, k)
		if err := gormlock.Migrate(db, opts...); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		var mu sync.Mutex
		var reported []error
		handle := func(err error) { mu.Lock(); reported = append(reported, err); mu.Unlock() }
		es := make([]*scheduler.Elector, 2)
		for i := range es {
			e, err := scheduler.NewElector(gormsched.Backend(openGorm(t, k), opts...), key,
				scheduler.WithRetry(100*time.Millisecond), scheduler.WithErrorHandler(handle))
			if err != nil {
				t.Fatal(err)
			}
			es[i] = e
		}
		all := append([]*scheduler.Elector(nil), es...)
		t.Cleanup(func() { // before the pools' leak checks
			for _, e := range all {
				_ = e.Close()
			}
		})
		first := waitOneLeader(t, es, 5*time.Second)
		if first != 0 {
			t.Fatalf("elector %d leads at start-up, want the first", first)
		}
		a := ormlock.Resign(key).By("op", "move")
		a.Cooldown = cooldown
		if _, err := gormlock.Act(db, a, opts...); err != nil {
			t.Fatalf("Act(Resign): %v", err)
		}
		asked := time.Now()
		second := waitOneLeader(t, es, keepalive+margin)
		for second == first && time.Since(asked) < keepalive+margin {
			time.Sleep(20 * time.Millisecond)
			second = waitOneLeader(t, es, keepalive+margin)
		}
		if second == first {
			t.Fatalf("elector %d still leads %v after it was asked to resign", first, time.Since(asked))
		}
		mu.Lock()
		heard := len(reported) > 0 && errors.Is(reported[0], ormlock.ErrLockLost) && strings.Contains(reported[0].Error(), "asked to resign by op: move")
		mu.Unlock()
		if !heard {
			t.Errorf("error handler heard %v, want the resign", reported)
		}
		if err := es[second].Close(); err != nil {
			t.Fatal(err)
		}
		es[second] = nil
		third := waitOneLeader(t, es, cooldown+margin)
		if since := time.Since(asked); third != first || since < cooldown-keepalive {
			t.Fatalf("elector %d leads %v after the resign, want elector %d after its cooldown %v", third, since, first, cooldown)
		}
	})
}
