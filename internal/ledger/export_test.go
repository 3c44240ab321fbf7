package ledger

// Internals for the external tests.
var (
	MissingTable  = missingTable
	MissingColumn = missingColumn
)
