package main

import (
	"fmt"
	"io"

	"gorm.io/gorm"

	"github.com/ormlock/ormlock/gormlock"
)

const fenceUsage = `Usage: ormlock fence advance --by N [flags]

Adds N to every fencing counter of the namespace (--namespace) in the fence
table of the ledger table (--ledger-table): gormlock.AdvanceFences. Run it
once after promoting an asynchronous replica (a PostgreSQL standby without
synchronous_standby_names, a MySQL/MariaDB replica without semi-synchronous
replication), before the clients use it: such a replica may lack the last
tokens the old primary issued and would issue them again, so that a holder
of the new primary and a stale holder of the old one share a token. After
it every token is greater than any the old primary can have issued, as long
as N exceeds the tokens issued per key in the replication lag; a generous
margin (1000000) costs nothing. It prints how many counters moved. N is in
1..2^52. Harmless to run again (the counters only grow), and needless after
a synchronous failover. See docs/PROTOCOL.md (Failover).

Examples:
  ormlock fence advance --by 1000000 --dsn "$NEW_PRIMARY_DSN"
  ormlock fence advance --by 1000000 --namespace billing
`

func fenceCmd(args []string, stdout, stderr io.Writer) error {
	var c common
	var by int64
	fs := newFlagSet("fence advance", fenceUsage, stdout)
	c.register(fs, true)
	fs.fl.Int64Var(&by, "by", 0, "add `N` to every counter")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 || pos[0] != "advance" {
		return usagef("fence takes one subcommand, advance (ormlock fence advance --by N), got %q", pos)
	}
	if by <= 0 || by > 1<<52 {
		return usagef("--by must be in 1..%d, got %d", int64(1)<<52, by)
	}
	opts, err := c.options()
	if err != nil {
		return err
	}
	return withDB(&c, func(db *gorm.DB) error {
		n, err := gormlock.AdvanceFences(db, by, opts...)
		if err != nil {
			return err
		}
		ns := "the namespace \"\""
		if c.namespace != "" {
			ns = fmt.Sprintf("namespace %q", c.namespace)
		}
		fmt.Fprintf(stdout, "%d fencing counters of %s advanced by %d\n", n, ns, by)
		return nil
	})
}
