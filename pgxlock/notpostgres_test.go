package pgxlock_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/pgxlock"
)

// A server that greets in MySQL 8's protocol (a 74-byte handshake, whose
// first byte pgx reads as the unknown message type "J": Oracle MySQL 8,
// go-mysql-server) is refused as not PostgreSQL, as MariaDB is
// (TestMySQLRefused); fn never runs.
func TestMySQL8HandshakeRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// the first packet of a MySQL 8.0 server: length 74, sequence 0,
	// protocol 10, its version, then the rest (not read by pgx)
	greeting := append([]byte{74, 0, 0, 0, 10}, "8.0.31\x00"...)
	greeting = append(greeting, make([]byte, 74-len(greeting)+4)...)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write(greeting)
			_ = c.Close()
		}
	}()
	wantNotPostgres(t, "a MySQL 8 handshake", ln.Addr().String())
}

// wantNotPostgres runs a Transaction on a pool pointed at addr, a server
// (what) that does not speak PostgreSQL's protocol, and fails unless it
// returns ErrUnsupportedDialect saying "PostgreSQL only" without calling fn.
func wantNotPostgres(t *testing.T, what, addr string) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), "postgres://root@"+addr+"/db?sslmode=disable&connect_timeout=5")
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	err = pgxlock.Transaction(context.Background(), pool, "k", func(context.Context, pgx.Tx) error {
		t.Error("fn called")
		return nil
	})
	if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), "PostgreSQL only") || strings.Count(err.Error(), "ormlock: ") != 1 {
		t.Fatalf("Transaction on %s: %v, want ErrUnsupportedDialect saying PostgreSQL only", what, err)
	}
	t.Logf("error on %s: %v", what, err)
}
