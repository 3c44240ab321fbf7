package testdb

import (
	"errors"
	"sync"
	"testing"
)

// StartAll is Start for several kinds at once: the private servers start in
// parallel (a MariaDB's first start takes seconds), and each is stopped and
// removed in tb.Cleanup. A server that cannot start fails the test, or
// skips it where Start would.
func StartAll(tb testing.TB, kinds ...Kind) []*Server {
	tb.Helper()
	out := make([]*Server, len(kinds))
	errs := make([]error, len(kinds))
	var wg sync.WaitGroup
	for i, k := range kinds {
		wg.Go(func() { out[i], errs[i] = StartServer(k) })
	}
	wg.Wait()
	for _, s := range out {
		if s != nil {
			tb.Cleanup(func() {
				if err := s.Close(); err != nil {
					tb.Logf("%v", err)
				}
			})
		}
	}
	if err := errors.Join(errs...); err != nil {
		skipOrFail(tb, err)
	}
	return out
}
