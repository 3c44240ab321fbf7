package lockproto

import (
	"errors"
	"testing"

	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
)

// Each dialect's target is rendered by its mechanism, without a server:
// what it declares, the items of every kind of target, and the advisory
// lock calls' texts, which docs/PROTOCOL.md quotes.
func TestMechanismRendersTargets(t *testing.T) {
	pg, err := newTarget(Postgres, keys.Name("job"), "")
	if err != nil {
		t.Fatal(err)
	}
	my, err := newTarget(MySQL, keys.Name("job"), "ns")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		tg                                 Target
		shared, xact, oneMsg, server, sess bool
	}{
		{pg, true, true, true, true, true},
		{my, false, false, false, true, true},
	} {
		m := c.tg.Mechanism()
		if m.SharedMode() != c.shared || m.XactLevel() != c.xact || m.OneMessage() != c.oneMsg || m.ServerWait() != c.server || m.SessionLevel() != c.sess {
			t.Errorf("%s: capabilities %v %v %v %v %v", m.Name(), m.SharedMode(), m.XactLevel(), m.OneMessage(), m.ServerWait(), m.SessionLevel())
		}
	}
	if !pg.Simple() || !pg.oneMessage() || pg.Postgres() != keys.Postgres(keys.Name("job"), "") {
		t.Errorf("one key on PostgreSQL: %+v", pg)
	}
	if !my.Simple() || my.MySQLName() != "ns:job" || len(my.each()) != 1 || my.each()[0].mysql != "ns:job" {
		t.Errorf("one key on MySQL: %+v", my)
	}

	// a set: the canonical order, the same whatever order it was given in
	set, err := newTarget(MySQL, keys.All(keys.Name("b"), keys.Name("A"), keys.Name("c")), "")
	if err != nil {
		t.Fatal(err)
	}
	if set.Simple() || set.anyOne() || len(set.each()) != 3 || set.items[0].mysql != "A" || set.items[1].mysql != "b" || set.items[2].mysql != "c" {
		t.Errorf("All on MySQL: %+v", set.items)
	}
	if _, err := newTarget(MySQL, keys.All(keys.Name("a"), keys.Name("A")), ""); !errors.Is(err, errs.ErrInvalidKey) {
		t.Errorf("All of two names MySQL takes for one lock: %v", err)
	}

	// shared: PostgreSQL only
	sh, err := newTarget(Postgres, keys.Shared(keys.Pair(1, 2)), "")
	if err != nil {
		t.Fatal(err)
	}
	if sh.Simple() || !sh.oneMessage() || !sh.sharedOne() || !sh.items[0].shared {
		t.Errorf("Shared on PostgreSQL: %+v", sh)
	}
	if _, err := newTarget(MySQL, keys.Shared(keys.Name("job")), ""); !errors.Is(err, errs.ErrUnsupportedDialect) {
		t.Errorf("Shared on MySQL: %v", err)
	}

	// a semaphore: its slots, and slot n+1 for the probe
	sem, err := newTarget(Postgres, keys.Semaphore(keys.Name("job"), 3), "")
	if err != nil {
		t.Fatal(err)
	}
	if !sem.anyOne() || !sem.oneMessage() || !sem.several() || len(sem.items) != 3 || sem.probeFor(0, 2) == nil || sem.probeFor(0, 1) != nil || sem.probeFor(1, 2) != nil {
		t.Errorf("Semaphore: %+v", sem)
	}
	if got := sem.probeFor(0, 2).it.pg; got != keys.Postgres(keys.SlotKey(keys.Name("job"), 4), "") {
		t.Errorf("the probe's slot: %+v", got)
	}
	if len(sem.reservations()) != 3 || len(pg.reservations()) != 1 || len(pg.reservations()[0]) != 1 {
		t.Errorf("reservations: %v, %v", sem.reservations(), pg.reservations())
	}

	// the calls' texts
	for _, c := range []struct {
		it        lockItem
		xact, try bool
		want      string
		args      int
	}{
		{lockItem{pg: keys.Postgres(keys.Name("job"), "")}, true, true, "pg_try_advisory_xact_lock($1::int8)", 1},
		{lockItem{pg: keys.Postgres(keys.Pair(1, 2), "")}, false, true, "pg_try_advisory_lock($1::int4, $2::int4)", 2},
		{lockItem{pg: keys.Postgres(keys.Name("job"), ""), shared: true}, true, false, "pg_advisory_xact_lock_shared($1::int8)", 1},
		{lockItem{pg: keys.Postgres(keys.Pair(1, 2), ""), shared: true}, false, false, "pg_advisory_lock_shared($1::int4, $2::int4)", 2},
	} {
		if call, args := pgLockCall(c.it, c.xact, c.try); call != c.want || len(args) != c.args {
			t.Errorf("pgLockCall: %q %v, want %q", call, args, c.want)
		}
	}
}
