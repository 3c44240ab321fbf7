package lockproto

import (
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/ormlock/ormlock/internal/config"
	"github.com/ormlock/ormlock/internal/errs"
	"github.com/ormlock/ormlock/internal/keys"
)

// Target is what one use of a lock takes, resolved for its dialect: the
// value an Op carries instead of per-dialect key fields, and the only
// input of the dialects' statement builders (PostgreSQL: pgLockMessage,
// pgTryMessage and the prepared statements for BEGIN and the lock in one
// message, PGTryXact and PGWaitXact, the session-level try and unlock of
// sharedlock.go, pgHolder; MySQL/MariaDB: GET_LOCK, RELEASE_LOCK and
// mysqlHolder on the name).
//
// A target is one key, exclusive (kindKey: every fast path, one lock
// statement); or a lock shape (shapes.go): several keys taken all or none
// in one canonical order (kindAll), one key in share mode (kindShared, on
// PostgreSQL), or any one of n slot keys (kindSemaphore). The verbs, the
// verb core and the adapters pass a keys.Key and are not touched by the
// kind.
type Target struct {
	kind  targetKind
	mech  Mechanism // the kind of server lock that takes it
	key   keys.Key
	pg    keys.PostgresKey // kindKey, kindShared: the advisory lock key (PostgreSQL)
	mysql string           // kindKey: the GET_LOCK name (MySQL/MariaDB)
	// items are the server locks of a shape, in the order they are taken
	// (kindAll: canonical; kindSemaphore: the slots 1 to n)
	items []lockItem
	// above is a semaphore's slot n+1, which only a caller with a larger
	// n takes (slotProbe)
	above lockItem
	// rkey is a rate key's row key in the rate table (kindRate, rate.go)
	rkey string
}

// lockItem is one server lock of a shape.
type lockItem struct {
	key    keys.Key         // the key it was resolved from (for a slot, the slot's name)
	pg     keys.PostgresKey // PostgreSQL
	mysql  string           // MySQL/MariaDB
	shared bool             // share mode (PostgreSQL)
}

// targetKind says what a Target takes.
type targetKind uint8

const (
	// kindKey: one key, exclusive.
	kindKey targetKind = iota + 1
	// kindAll: every item, all or none, in items' order.
	kindAll
	// kindShared: one key in share mode (PostgreSQL).
	kindShared
	// kindSemaphore: any one of the items (slots).
	kindSemaphore
	// kindRate: a token of a rate limit, taken in fn's transaction
	// (rate.go); no server lock.
	kindRate
)

// kinds are what each kind of target is, which the protocol asks in
// place of comparing kinds.
var kinds = [...]struct {
	simple     bool // one exclusive key: every fast path, one lock statement
	oneMessage bool // travels with BEGIN in one message (onemsg.go)
	several    bool // several server locks, which that message takes in one statement (pgshape.go)
	anyOne     bool // any one of the items is taken (a semaphore's slots), not all of them
	shared     bool // the one key is taken in share mode
}{
	kindKey:       {simple: true, oneMessage: true},
	kindAll:       {oneMessage: true, several: true},
	kindShared:    {oneMessage: true, shared: true},
	kindSemaphore: {oneMessage: true, several: true, anyOne: true},
	kindRate:      {},
}

// newTarget resolves k in namespace ns for dialect d (keys.Postgres,
// keys.MySQL), with d's mechanism (mechanismFor). k has been validated.
func newTarget(d Dialect, k keys.Key, ns string) (Target, error) {
	return newTargetOf(d, k, ns, false)
}

// newTargetOf is newTarget, as a lease when lease is set.
func newTargetOf(d Dialect, k keys.Key, ns string, lease bool) (Target, error) {
	m, err := mechanismFor(d, lease)
	if err != nil {
		return Target{}, err
	}
	if keys.IsRate(k) {
		return rateTarget(k, ns), nil
	}
	t := Target{kind: kindKey, key: k, mech: m}
	switch {
	case keys.IsSet(k):
		t.kind = kindAll
		for _, e := range keys.Elements(k) {
			t.items = append(t.items, m.resolve(e, ns))
		}
		if err := t.order(); err != nil {
			return Target{}, err
		}
	case keys.Count(k) > 0:
		t.kind = kindSemaphore
		plain := keys.Plain(k)
		for i := 1; i <= keys.Count(k); i++ {
			t.items = append(t.items, m.resolve(keys.SlotKey(plain, i), ns))
		}
		t.above = m.resolve(keys.SlotKey(plain, keys.Count(k)+1), ns)
	case keys.IsShared(k):
		t.kind = kindShared
		t.items = []lockItem{m.resolve(k, ns)}
		t.pg = t.items[0].pg
	default:
		it := m.resolve(k, ns)
		t.pg, t.mysql = it.pg, it.mysql
	}
	if !t.Simple() && !m.SharedMode() && t.anyShared() {
		return Target{}, fmt.Errorf("%w: %s: MySQL and MariaDB have no shared named lock (GET_LOCK is exclusive); Shared works on PostgreSQL only", errs.ErrUnsupportedDialect, k.String())
	}
	return t, nil
}

// order sorts a set's items into the canonical order over the resolved
// server keys (the mechanism's compare), and refuses a set two of whose
// keys are one server lock. PostgreSQL: bigint keys (classid, objid as
// pg_locks has them, objsubid 1) before pairs (objsubid 2), each by its
// lock tag. MySQL/MariaDB: by name, case-folded (mysqlFold), so that names
// a case-insensitive server (MySQL) takes for one lock are refused as one.
func (t *Target) order() error {
	slices.SortStableFunc(t.items, t.mech.compare)
	for i := 1; i < len(t.items); i++ {
		if t.mech.compare(t.items[i-1], t.items[i]) == 0 {
			return fmt.Errorf("%w: %s: %q and %q are one server lock (%s)", errs.ErrInvalidKey, t.key.String(),
				t.items[i-1].key.String(), t.items[i].key.String(), t.mech.serverName(t.items[i]))
		}
	}
	return nil
}

// mysqlFold is a lock name as the canonical order of a set compares it
// (case-folded by strings.ToLower). It is part of the protocol: two
// versions that ordered a set differently could wait for each other in a
// cycle, so it does not change; the process's reservations use
// MySQLLockIdentity.
func mysqlFold(name string) string { return strings.ToLower(name) }

// MySQLLockIdentity is the identity under which this process reserves the
// GET_LOCK name name (as the server receives it: namespace and the 64-byte
// rule applied) on its shared lock connections (sharedconn.go), on every
// path that takes it: a plain key, an item of All, a semaphore slot. It is
// never less strict than any supported server's comparison of lock names
// (docs/PROTOCOL.md, Which keys meet on MySQL/MariaDB, and why they stay
// so): MariaDB compares them byte for byte, MySQL 5.7 and later lower-case
// them first, so the identity is each character lower-cased and then
// replaced by one representative of its Unicode simple case folding class
// (K, k and the Kelvin sign; S, s and ſ), which two names any of them
// takes for one lock always share. Names the server keeps apart may share
// it too: a second caller in the process is then refused (or waits), which
// is safe.
func MySQLLockIdentity(name string) string {
	return strings.Map(foldRune, name)
}

// foldRune is the representative of r's class: the lower case of the least
// rune of the simple case folding orbit of r's lower case.
func foldRune(r rune) rune {
	if r < utf8.RuneSelf {
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		return r
	}
	r = unicode.ToLower(r)
	least := r
	for f := unicode.SimpleFold(r); f != r; f = unicode.SimpleFold(f) {
		least = min(least, f)
	}
	return unicode.ToLower(least)
}

func (t Target) anyShared() bool {
	for _, it := range t.items {
		if it.shared {
			return true
		}
	}
	return false
}

// Simple reports whether t is one exclusive key, which every fast path
// takes with one statement.
func (t Target) Simple() bool { return kinds[t.kind].simple }

// oneMessage reports whether t travels with BEGIN in one message on
// PostgreSQL (onemsg.go): every kind (a set's keys and a semaphore's slots
// in one statement of that message: pgshape.go).
func (t Target) oneMessage() bool { return kinds[t.kind].oneMessage }

// several reports whether t is several server locks (All, Semaphore),
// which the one message takes in one statement (pgShapeMessage).
func (t Target) several() bool { return kinds[t.kind].several }

// anyOne reports whether any one of t's items is taken (a semaphore's
// slots), rather than all of them in order.
func (t Target) anyOne() bool { return kinds[t.kind].anyOne }

// sharedOne reports whether t is one key taken in share mode.
func (t Target) sharedOne() bool { return kinds[t.kind].shared }

// Mechanism is the kind of server lock t is taken with.
func (t Target) Mechanism() Mechanism { return t.mech }

// each are the server locks t takes: a shape's items, or its one
// exclusive key as the one item, for the paths that render any target
// alike (the fast paths of the one key use pg and mysql).
func (t Target) each() []lockItem {
	if t.Simple() {
		return []lockItem{{key: t.key, pg: t.pg, mysql: t.mysql}}
	}
	return t.items
}

// Key is the key the target takes.
func (t Target) Key() keys.Key { return t.key }

// Postgres is the resolved advisory lock key (PostgreSQL only; for a
// shape, that of Shared's one key, else zero).
func (t Target) Postgres() keys.PostgresKey { return t.pg }

// MySQLName is the resolved GET_LOCK name (MySQL/MariaDB only, one
// exclusive key).
func (t Target) MySQLName() string { return t.mysql }

// shapeCombines refuses, before anything is taken, a lock shape with a
// use or option it does not combine with this release (docs/PROTOCOL.md,
// Lock shapes): fencing, one exclusive key (Lead), and one holder (Holder)
// of a set or a semaphore.
func shapeCombines(verb string, h Holding, k keys.Key, cfg config.Config) error {
	switch {
	case !keys.IsShape(k):
		return nil
	case cfg.Fencing:
		return fmt.Errorf("%w: %s of %s: WithFencing does not combine with a lock shape (All, Shared, Semaphore)", errs.ErrInvalidArgument, verb, k.String())
	case h.OneKey:
		return fmt.Errorf("%w: %s of %s: %s takes one exclusive key, not a lock shape", errs.ErrInvalidArgument, verb, k.String(), verb)
	case h.OneHolder && !keys.IsShared(k):
		return fmt.Errorf("%w: %s of %s: a set or a semaphore has several holders; use Holders", errs.ErrInvalidArgument, verb, k.String())
	}
	return nil
}
