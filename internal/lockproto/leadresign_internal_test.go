package lockproto

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
)

// Which resigns ask a term to step down: one asked after the term began
// (by the server's clock), whoever was recorded as the holder; one asked
// before it only when it names this owner and falls within the probe's
// round trip of the term's estimated start (the estimate is early by at
// most that); never one for another owner asked before the term.
func TestAsksTerm(t *testing.T) {
	began := time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)
	rtt := 5 * time.Millisecond
	cases := []struct {
		name  string
		at    time.Time
		owner string
		self  string
		want  bool
	}{
		{"after the start", began.Add(time.Millisecond), "", "a", true},
		{"after the start, another owner recorded", began.Add(time.Millisecond), "b", "a", true},
		{"before the start, another owner", began.Add(-time.Millisecond), "b", "a", false},
		{"before the start within the round trip, this owner", began.Add(-time.Millisecond), "a", "a", true},
		{"before the start beyond the round trip, this owner", began.Add(-time.Second), "a", "a", false},
		{"before the start, no owner of its own", began.Add(-time.Millisecond), "", "", false},
		{"the previous term's resign, this owner", began.Add(-30 * time.Second), "a", "a", false},
	}
	for _, c := range cases {
		if got := asksTerm(ResignAsk{At: c.at, Owner: c.owner}, c.self, began, rtt); got != c.want {
			t.Errorf("%s: asksTerm = %v, want %v", c.name, got, c.want)
		}
	}
}

// The cause fn's context ends with wraps ErrLockLost and names the
// author and the reason; a resign without a cooldown keeps the default.
func TestResignCause(t *testing.T) {
	a := ResignAsk{Author: "alice", Reason: "host draining"}
	if err := a.Cause(); !errors.Is(err, errs.ErrLockLost) || err.Error() != "ormlock: lock lost: asked to resign by alice: host draining" {
		t.Errorf("Cause() = %v", err)
	}
	if err := (ResignAsk{Author: "bob"}).Cause(); err.Error() != "ormlock: lock lost: asked to resign by bob" {
		t.Errorf("Cause() without a reason = %v", err)
	}
	if d := a.cooldown(); d != config.DefaultResignCooldown {
		t.Errorf("cooldown() = %v, want the default %v", d, config.DefaultResignCooldown)
	}
	if d := (ResignAsk{Cooldown: time.Second}).cooldown(); d != time.Second {
		t.Errorf("cooldown() = %v, want 1s", d)
	}
}

// noTable is a ResignReader of a ledger without a controls table.
type noTable struct{ asked int }

func (noTable) Probe(context.Context) (time.Time, bool, error) { return time.Now(), false, nil }
func (n *noTable) Asked(context.Context) (ResignAsk, bool, error) {
	n.asked++
	return ResignAsk{}, false, nil
}

// A term whose ledger has no controls table probes once and reads no row
// (no statement per interval on a ledger Migrate has not upgraded).
func TestPollWithoutTable(t *testing.T) {
	o := &Op{Cfg: config.New(config.Option(func(c *config.Config) { c.Keepalive = config.MinKeepalive }))}
	var r noTable
	if a := poll(context.Background(), o, &r, time.Now()); a != nil || r.asked != 0 {
		t.Errorf("poll without a table = %v after %d reads, want nil after none", a, r.asked)
	}
}
