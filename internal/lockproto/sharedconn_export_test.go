package lockproto

import (
	"database/sql"
	"time"
)

// SharedIntervals returns the keepalive interval of each shared lock
// connection that db has now (sharedconn.go).
func SharedIntervals(db *sql.DB) []time.Duration {
	p := sharedPoolOf(db)
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []time.Duration
	for _, c := range p.conns {
		out = append(out, c.interval)
	}
	return out
}
