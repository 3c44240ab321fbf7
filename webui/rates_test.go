package webui_test

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
	"regexp"
	"testing"
	"time"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
	"github.com/ormlock/ormlock/webui"
)

// TestRates: the overview shows a rate limit's tokens in use and the
// refusals this process counted for it (webui.Refusals as the verbs'
// observer), on every server.
func TestRates(t *testing.T) {
	forEachKind(t, func(t *testing.T, k testdb.Kind) {
		db := testdb.Open(t, k)
		t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
		ctx := context.Background()
		if err := sqllock.Migrate(ctx, db); err != nil {
			t.Fatal(err)
		}
		refusals := webui.NewRefusals()
		key := ormlock.Rate("webui-rate-"+t.Name(), 2, time.Hour)
		for i := range 5 {
			err := sqllock.Transaction(ctx, db, key, func(context.Context, *sql.Tx) error { return nil }, ormlock.WithObserver(refusals))
			if i < 2 && err != nil || i >= 2 && !errors.Is(err, ormlock.ErrNotAcquired) {
				t.Fatalf("take %d: %v", i+1, err)
			}
		}
		if n := refusals.Count(key); n != 3 {
			t.Errorf("Refusals.Count = %d, want 3", n)
		}
		srv := serve(t, db, webui.WithRates(key), webui.WithRefusals(refusals))
		code, body, _ := get(t, srv, "/")
		if code != http.StatusOK {
			t.Fatalf("GET /: %d\n%s", code, body)
		}
		mustContain(t, body, `id="rates"`, "2 per 1h0m0s", "Refused here")
		if !regexp.MustCompile(`(?s)rate\(webui-rate-[^<]*,2/1h0m0s\)</td><td>2 per 1h0m0s</td><td class="num">2</td><td class="num">0</td>.*?<td class="num">3</td>`).MatchString(body) {
			t.Errorf("the rate row does not show 2 used, 0 free, 3 refused:\n%s", body)
		}
		if _, err := webui.Handler(db, webui.WithRates(ormlock.Name("not-a-rate"))); !errors.Is(err, ormlock.ErrInvalidArgument) {
			t.Errorf("WithRates of a plain key: %v, want ErrInvalidArgument", err)
		}
	})
}
