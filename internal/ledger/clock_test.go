package ledger

import (
	"strings"
	"testing"
	"time"
)

// skew is zero when the server's reading lies between the local readings
// around the statement, else the difference to the nearer one; checkSkew
// refuses more than MaxClockSkew either way, naming the difference.
func TestClockSkew(t *testing.T) {
	t0 := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		before, after, server time.Time
		want                  time.Duration
	}{
		{t0, t0.Add(time.Second), t0.Add(500 * time.Millisecond), 0},
		{t0, t0, t0, 0},
		{t0, t0.Add(time.Second), t0.Add(-20 * time.Second), -20 * time.Second},
		{t0, t0.Add(time.Second), t0.Add(21 * time.Second), 20 * time.Second},
	} {
		if got := skew(c.before, c.after, c.server); got != c.want {
			t.Errorf("skew(%v, %v, %v) = %v, want %v", c.before, c.after, c.server, got, c.want)
		}
	}
	if err := checkSkew("v", "j", t0, t0, t0.Add(MaxClockSkew)); err != nil {
		t.Errorf("a skew of exactly the bound: %v", err)
	}
	for server, way := range map[time.Time]string{
		t0.Add(MaxClockSkew + time.Millisecond): "1m0.001s behind",
		t0.Add(-2 * time.Minute):                "2m0s ahead of",
	} {
		err := checkSkew("gormlock.RunScheduled", "daily", t0, t0, server)
		if err == nil || !strings.Contains(err.Error(), way) || !strings.Contains(err.Error(), `job "daily"`) || !strings.Contains(err.Error(), "nothing ran") {
			t.Errorf("server at %v: %v, want an error saying the caller's clock is %s the server's", server, err, way)
		}
	}
}
