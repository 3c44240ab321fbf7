package lockproto

// Internals of lead.go and owner.go for the external tests.
var (
	PGOwnerSQL = pgOwnerSQL
	Jitter     = jitter
)
