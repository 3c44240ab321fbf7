package ledger

import "github.com/ormlock/ormlock/internal/lockproto"

// Internals for the external tests.
var (
	MissingTable  = func(err error) bool { return either(err, lockproto.Server.MissingTable) }
	MissingColumn = func(err error) bool { return either(err, lockproto.Server.MissingColumn) }
)

// either reports whether is says so of err for either server.
func either(err error, is func(lockproto.Server, error) bool) bool {
	for _, d := range []lockproto.Dialect{lockproto.Postgres, lockproto.MySQL} {
		if s, _ := lockproto.ServerOf(d); is(s, err) {
			return true
		}
	}
	return false
}

// pg reports whether t is PostgreSQL's (the tests' own branches).
func (t *Table) pg() bool { return t.d == lockproto.Postgres }
