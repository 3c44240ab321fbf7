package pgxdriver

import (
	"context"
	"database/sql"
	"errors"
	"net"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/ormlock/ormlock/internal/lockproto"
)

// The multiplexer probe of the server check (lockproto's engines.go: two
// connections that announce one backend pid are one server session).

// multiplexerProbeTimeout bounds the probe's second connection.
const multiplexerProbeTimeout = 5 * time.Second

// ProbePIDs returns the backend pid conn announced and the one a second
// connection, opened with conn's settings to conn's server (probePID),
// announces; an error when conn is not a pgx connection or the second
// connection failed.
func (driver) ProbePIDs(ctx context.Context, conn *sql.Conn) (announced, second uint32, err error) {
	var (
		cfg    *pgx.ConnConfig
		server net.Addr
	)
	err = conn.Raw(func(dc any) error {
		c, ok := lockproto.DriverConn(dc).(conner)
		if !ok {
			return errNotPgx
		}
		pc := c.Conn().PgConn()
		announced, cfg, server = pc.PID(), c.Conn().Config(), pc.Conn().RemoteAddr()
		return nil
	})
	if err != nil || announced == 0 || cfg == nil {
		return announced, 0, errNotPgx
	}
	second, err = probePID(ctx, &cfg.Config, server)
	return announced, second, err
}

// probeDial marks the dials of one probe's start-up (probePID).
type probeDial struct{}

// errProbeDial refuses a dial made outside a probe's start-up.
var errProbeDial = errors.New("multiplexer probe: no connection after the probe's own")

// probePID opens one connection with cfg's settings to server (a TCP
// address; another kind: where cfg says), reads the backend pid it
// announces and closes it. It dials nothing else, then or later: pgx
// answers a start-up cut short (a server at its connection limit closes
// the socket) with a CancelRequest on a new connection from a goroutine
// of its own, which would outlive the check and, on a server that takes
// one client at a time, hold its only slot against the pool's next
// connection (pglite-socket does not answer a CancelRequest without a
// secret key, and keeps it until pgx gives up 15 s later). Only dials
// under the probe's own context go out.
func probePID(ctx context.Context, cfg *pgconn.Config, server net.Addr) (uint32, error) {
	c := cfg.Copy()
	dial := c.DialFunc
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	c.DialFunc = func(dctx context.Context, network, addr string) (net.Conn, error) {
		if dctx.Value(probeDial{}) == nil {
			return nil, errProbeDial
		}
		if tcp, ok := server.(*net.TCPAddr); ok {
			// conn's own server, whichever of a multi-host list it is
			network, addr = tcp.Network(), tcp.String()
		}
		return dial(dctx, network, addr)
	}
	pctx, cancel := context.WithTimeout(context.WithValue(ctx, probeDial{}, true), multiplexerProbeTimeout)
	defer cancel()
	second, err := pgconn.ConnectConfig(pctx, c)
	if err != nil {
		return 0, err
	}
	other := second.PID()
	_ = second.Close(pctx)
	return other, nil
}
