package lockproto

// Internals for the external tests (statement timeouts, MySQL's
// in-transaction state, lead.go and owner.go).
var (
	StatementTimeout = statementTimeout
	MySQLInTx        = mysqlInTx
	PGOwnerSQL       = pgOwnerSQL
	Jitter           = jitter
)

// PastDeadline is a context whose deadline has passed but whose timer has
// not fired yet (see pastDeadline).
type PastDeadline = pastDeadline
