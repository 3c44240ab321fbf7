package sqllock_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
)

func TestMain(m *testing.M) { os.Exit(testdb.Main(m)) }

// wrapDriver hides a driver's type, as otelsql and sqlhooks do.
type wrapDriver struct{ drv driver.Driver }

func (w wrapDriver) Open(dsn string) (driver.Conn, error) { return w.drv.Open(dsn) }

// noServer is a driver ormlock does not know, whose server cannot be asked.
type noServer struct{}

func (noServer) Open(string) (driver.Conn, error) { return nil, errors.New("no server here") }

func init() {
	sql.Register("sqllock-test-wrapped-pgx", wrapDriver{stdlib.GetDefaultDriver()})
	sql.Register("sqllock-test-wrapped-mysql", wrapDriver{&mysql.MySQLDriver{}})
	sql.Register("sqllock-test-noserver", noServer{})
}

// A driver whose type hides which server it reaches is recognised by asking
// the server; the lock it takes excludes hand-written SQL.
func TestWrappedDriver(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			name := "sqllock-test-wrapped-" + map[string]string{"postgres": "pgx", "mysql": "mysql"}[k.Dialect()]
			db, err := sql.Open(name, testdb.DSN(t, k))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
			key := "sqllock-wrapped-" + t.Name()
			ctx := context.Background()
			err = sqllock.Transaction(ctx, db, key, func(ctx context.Context, tx *sql.Tx) error {
				if testdb.RawFree(t, k, "", key) {
					return errors.New("hand-written SQL took the lock held by sqllock")
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if !testdb.RawFree(t, k, "", key) {
				t.Fatal("lock held after Transaction")
			}
		})
	}
}

func TestUnknownDriver(t *testing.T) {
	db, err := sql.Open("sqllock-test-noserver", "")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = sqllock.Transaction(context.Background(), db, "k", func(context.Context, *sql.Tx) error {
		t.Error("fn called")
		return nil
	})
	if !errors.Is(err, ormlock.ErrUnsupportedDialect) || !strings.Contains(err.Error(), "sqllock_test.noServer") || strings.Count(err.Error(), "ormlock: ") != 1 {
		t.Fatalf("err = %v, want ErrUnsupportedDialect naming the driver", err)
	}
}

func TestBadInput(t *testing.T) {
	ctx := context.Background()
	fn := func(context.Context, *sql.Tx) error { return nil }
	var nilCtx context.Context
	db := &sql.DB{}
	cases := map[string]error{
		"nil db":       sqllock.Transaction(ctx, nil, "k", fn),
		"nil fn":       sqllock.Transaction(ctx, db, "k", nil),
		"nil context":  sqllock.Session(nilCtx, db, "k", func(context.Context) error { return nil }),
		"nil schedule": sqllock.RunScheduled(ctx, db, "job", nil, fn),
		"Runs limit":   func() error { _, err := sqllock.Runs(ctx, nil, "job", 0); return err }(),
		"Prune nil db": func() error { _, err := sqllock.Prune(ctx, nil, time.Hour); return err }(),
		"Lock nil tx":  sqllock.Lock(ctx, nil, "k"),
		"Lock nil ctx": sqllock.Lock(nilCtx, &sql.Tx{}, "k"),
	}
	for name, err := range cases {
		if !errors.Is(err, ormlock.ErrInvalidArgument) || strings.Count(err.Error(), "ormlock: ") != 1 {
			t.Errorf("%s: %v, want ErrInvalidArgument with one \"ormlock: \"", name, err)
		}
	}
	if err := sqllock.Transaction(ctx, testdb.Open(t, testdb.Postgres), "", fn); !errors.Is(err, ormlock.ErrInvalidKey) {
		t.Errorf("empty key: %v, want ErrInvalidKey", err)
	}
}
