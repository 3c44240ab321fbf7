package lockproto

// Internals for the external tests (statement timeouts, MySQL's
// in-transaction state, lead.go and owner.go).
var (
	StatementTimeout = statementTimeout
	MySQLInTx        = mysqlInTx
	PGOwnerSQL       = pgOwnerSQL
	Jitter           = jitter
)
