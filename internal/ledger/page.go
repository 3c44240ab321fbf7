package ledger

import (
	"context"
	"time"

	"github.com/ormlock/ormlock/internal/lockproto"
)

// RunsBefore returns the last limit rows of job in namespace ns whose slot
// is before before, newest slot first: the page of [Table.Runs] that
// follows a page whose oldest slot is before (the JSON API's cursor). It
// reads the primary key's range (namespace, job, slot < before) backwards.
func (t *Table) RunsBefore(ctx context.Context, q Querier, ns, job string, before time.Time, limit int) ([]Row, error) {
	where := lockproto.PerServer(t.s,
		` WHERE namespace = $1 AND job = $2 AND slot < $3 ORDER BY slot DESC LIMIT $4`,
		` WHERE namespace = ? AND job = ? AND slot < ? ORDER BY slot DESC LIMIT ?`)
	rs, err := t.query(ctx, q, t.sql.selectRows(t)+where, ns, job, t.slotArg(before), limit)
	if err != nil {
		return nil, t.wrap("read runs", err)
	}
	return rs, nil
}
