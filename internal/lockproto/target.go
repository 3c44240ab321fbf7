package lockproto

import (
	"fmt"

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
// Today a target is one key, exclusive: kindKey. A lock shape is a new
// kind here (several keys taken all or none in one canonical order, a
// shared mode, at most n holders over slot keys), resolved by newTarget
// and rendered by each dialect's builders; the verbs, the verb core and
// the adapters pass a keys.Key (or, then, a shape) and are not touched.
type Target struct {
	kind  targetKind
	key   keys.Key
	pg    keys.PostgresKey // PostgreSQL: the advisory lock key
	mysql string           // MySQL/MariaDB: the GET_LOCK name
}

// targetKind says what a Target takes.
type targetKind uint8

const (
	// kindKey: one key, exclusive.
	kindKey targetKind = iota + 1
)

// newTarget resolves k in namespace ns for dialect d (keys.Postgres,
// keys.MySQL).
func newTarget(d Dialect, k keys.Key, ns string) (Target, error) {
	t := Target{kind: kindKey, key: k}
	switch d {
	case Postgres:
		t.pg = keys.Postgres(k, ns)
	case MySQL:
		t.mysql = keys.MySQL(k, ns)
	default:
		return Target{}, fmt.Errorf("%w: dialect %d", errs.ErrUnsupportedDialect, d)
	}
	return t, nil
}

// Key is the key the target takes.
func (t Target) Key() keys.Key { return t.key }

// Postgres is the resolved advisory lock key (PostgreSQL only).
func (t Target) Postgres() keys.PostgresKey { return t.pg }

// MySQLName is the resolved GET_LOCK name (MySQL/MariaDB only).
func (t Target) MySQLName() string { return t.mysql }
