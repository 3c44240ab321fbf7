// Command fencing shows the failure that fencing tokens prevent, and how
// the token refuses it.
//
// A lock on a database connection is lost when that connection dies. A
// holder that is paused at that moment (a long GC pause, a stopped VM, a
// slow network) does not hear of it, and can go on working after another
// replica has taken the lock. Here:
//
//  1. replica-a takes the lock with gormlock.Session and ormlock.WithFencing,
//     and gets token N; then it pauses, not watching its context, as a
//     stopped process would;
//  2. its lock connection is killed (a network failure, a failover), so the
//     server frees the lock;
//  3. replica-b takes the lock, gets token N+1, and writes the account row
//     twice, recording its token in the row's fence column: a holder writes
//     under its token as often as it likes;
//  4. replica-a wakes and writes with token N: the UPDATE only matches while
//     fence <= N, so it matches nothing and gormlock.CheckFenced returns
//     ormlock.ErrStaleToken. Without the token, replica-a's stale write
//     would have overwritten replica-b's.
//
// With no flags it needs nothing but Go: the database is go-mysql-server's
// in-process MySQL engine. -dsn runs it on a real server instead:
//
//	go run ./fencing
//	go run ./fencing -dsn 'postgres://app:secret@localhost:5432/app'
//	go run ./fencing -dsn 'app:secret@tcp(127.0.0.1:3306)/app'
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"time"

	mysqldrv "github.com/go-sql-driver/mysql"
	"gorm.io/gorm"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/examples/internal/demo"
	"github.com/ormlock/ormlock/gormlock"
	"github.com/ormlock/ormlock/keyhash"
)

func main() { demo.Main("fencing", run) }

// Account is the resource both replicas write: fence is the greatest token
// that has written it.
type Account struct {
	ID      int    `gorm:"primaryKey;autoIncrement:false"`
	Owner   string `gorm:"size:32"`
	Balance int64
	Fence   int64
}

// TableName is fencing_accounts.
func (Account) TableName() string { return "fencing_accounts" }

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	// the killed connection is expected: keep the driver from logging it
	_ = mysqldrv.SetLogger(log.New(io.Discard, "", 0))
	fs := flag.NewFlagSet("fencing", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dsn := fs.String("dsn", os.Getenv("ORMLOCK_DSN"), "database: a postgres:// URL or a MySQL/MariaDB DSN (user:pass@tcp(host:port)/db); default $ORMLOCK_DSN, else the embedded MySQL engine")
	key := fs.String("key", "fencing-demo", "the lock's name")
	keepalive := fs.Duration("keepalive", 200*time.Millisecond, "replica-a's Session keepalive interval")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *keepalive <= 0 {
		return fmt.Errorf("-keepalive %v: must be positive", *keepalive)
	}
	where := "the embedded MySQL engine (go-mysql-server, in process)"
	if *dsn == "" {
		e, err := startEmbedded()
		if err != nil {
			return err
		}
		defer e.Close()
		*dsn = e.DSN()
	} else {
		where = "the server of -dsn"
	}
	a, err := demo.OpenGORM(*dsn)
	if err != nil {
		return fmt.Errorf("replica-a: %w", err)
	}
	defer demo.CloseGORM(a)
	b, err := demo.OpenGORM(*dsn)
	if err != nil {
		return fmt.Errorf("replica-b: %w", err)
	}
	defer demo.CloseGORM(b)
	a, b = a.WithContext(ctx), b.WithContext(ctx)

	// Migrate creates the fence table (ormlock_runs_fence) that issues
	// the tokens; the account row starts with fence 0.
	if err := gormlock.Migrate(a); err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	if err := a.AutoMigrate(&Account{}); err != nil {
		return fmt.Errorf("create %s: %w", Account{}.TableName(), err)
	}
	if err := a.Where("id = ?", 1).Delete(&Account{}).Error; err != nil {
		return err
	}
	if err := a.Create(&Account{ID: 1, Owner: "nobody"}).Error; err != nil {
		return err
	}
	fmt.Fprintf(stdout, "fencing: two replicas (one pool each) on %s; lock %q\n\n", where, *key)

	// write is the fenced write: it only matches while the row's fence is
	// at most the writer's token, so the holder of the greatest token may
	// write again. (Each write here changes the balance; on MySQL/MariaDB a
	// write that may change nothing needs clientFoundRows=true in the DSN,
	// or CheckFenced would take it for a stale one.)
	write := func(db *gorm.DB, owner string, tok int64) error {
		return gormlock.CheckFenced(db.Model(&Account{}).
			Where("id = ? AND fence <= ?", 1, tok).
			Updates(map[string]any{"owner": owner, "balance": gorm.Expr("balance + 100"), "fence": tok}))
	}

	held := make(chan int64, 1)
	wake := make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		aDone <- gormlock.Session(a, *key, func(lctx context.Context) error {
			tok, _ := ormlock.FencingToken(lctx)
			held <- tok
			<-wake // paused: a stopped process watches nothing
			return write(a.WithContext(context.WithoutCancel(lctx)), "replica-a", tok)
		}, ormlock.WithFencing(), ormlock.WithKeepalive(*keepalive))
	}()
	var tokA int64
	select {
	case tokA = <-held:
	case err := <-aDone:
		return fmt.Errorf("replica-a: %w", err)
	}
	fmt.Fprintf(stdout, "replica-a: holds the lock with token %d, and pauses (a long GC pause)\n", tokA)

	id, err := killLockConn(ctx, b, *key)
	if err != nil {
		close(wake)
		<-aDone
		return fmt.Errorf("kill replica-a's lock connection: %w", err)
	}
	fmt.Fprintf(stdout, "network:   replica-a's lock connection (%d) dies; the server frees the lock\n", id)

	var tokB int64
	err = gormlock.Transaction(b, *key, func(tx *gorm.DB) error {
		tokB, _ = gormlock.FencingToken(tx)
		if err := write(tx, "replica-b", tokB); err != nil {
			return err
		}
		return write(tx, "replica-b", tokB) // its own second write is accepted
	}, ormlock.WithFencing(), ormlock.WithWait(10*time.Second))
	if err != nil {
		close(wake)
		<-aDone
		return fmt.Errorf("replica-b: %w", err)
	}
	fmt.Fprintf(stdout, "replica-b: takes the lock with token %d and writes the account twice\n", tokB)

	close(wake)
	errA := <-aDone
	stale := errors.Is(errA, ormlock.ErrStaleToken)
	switch {
	case stale:
		fmt.Fprintf(stdout, "replica-a: wakes and writes with token %d: refused (%v)\n", tokA, ormlock.ErrStaleToken)
	case errA == nil:
		fmt.Fprintf(stdout, "replica-a: wakes and writes with token %d: accepted (this is the bug fencing prevents)\n", tokA)
	default:
		return fmt.Errorf("replica-a: %w", errA)
	}
	if errors.Is(errA, ormlock.ErrLockLost) {
		fmt.Fprintf(stdout, "replica-a: its Session reports the lost lock too (%v)\n", ormlock.ErrLockLost)
	}

	var acct Account
	if err := b.First(&acct, 1).Error; err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\naccount 1: owner %s, balance %d, fence %d\n", acct.Owner, acct.Balance, acct.Fence)
	if !stale || acct.Owner != "replica-b" || acct.Fence != tokB || acct.Balance != 200 {
		return errors.New("the stale write was not refused")
	}
	fmt.Fprintf(stdout, "refused: the stale holder's write (token %d) after replica-b's (token %d)\n", tokA, tokB)
	return nil
}

// killLockConn ends the server connection that holds the lock named key (no
// namespace), as a network failure would, and returns its id. The
// connection belongs to the same database user, which may end its own
// connections on both servers.
func killLockConn(ctx context.Context, db *gorm.DB, key string) (int64, error) {
	var id int64
	if db.Dialector.Name() == "postgres" {
		k := uint64(keyhash.Int64(key))
		err := db.Raw(`SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objsubid = 1 AND granted
AND classid::int8 = ? AND objid::int8 = ?`, int64(k>>32), int64(k&0xffffffff)).Row().Scan(&id)
		if err != nil {
			return 0, err
		}
		var ok bool
		if err := db.Raw("SELECT pg_terminate_backend(?)", id).Row().Scan(&ok); err != nil || !ok {
			return id, fmt.Errorf("pg_terminate_backend(%d): %v %w", id, ok, err)
		}
		return id, nil
	}
	if err := db.Raw("SELECT IS_USED_LOCK(?)", keyhash.MySQLName("", key)).Row().Scan(&id); err != nil {
		return 0, err
	}
	return id, db.Exec(fmt.Sprintf("KILL %d", id)).Error
}
