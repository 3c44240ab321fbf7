package webui_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"net/http"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/ormlock/ormlock"
	"github.com/ormlock/ormlock/internal/testdb"
	"github.com/ormlock/ormlock/sqllock"
	"github.com/ormlock/ormlock/webui"
)

// hiddenDriver is a driver whose type hides the server it reaches, as a
// tracing wrapper's does.
type hiddenDriver struct{ drv driver.Driver }

func (h hiddenDriver) Open(dsn string) (driver.Conn, error) { return h.drv.Open(dsn) }

func init() {
	sql.Register("webui-test-hidden-postgres", hiddenDriver{stdlib.GetDefaultDriver()})
	sql.Register("webui-test-hidden-mysql", hiddenDriver{&mysql.MySQLDriver{}})
}

// TestHiddenDriver: over a driver whose type does not say which server it
// reaches, the view tells the server as sqllock does (it asks, in a
// read-only transaction), checks it and reads its locks.
func TestHiddenDriver(t *testing.T) {
	for _, k := range []testdb.Kind{testdb.Postgres, testdb.MariaDB} {
		t.Run(string(k), func(t *testing.T) {
			db, err := sql.Open("webui-test-hidden-"+k.Dialect(), testdb.DSN(t, k))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			t.Cleanup(func() { testdb.AssertNoLeaks(t, k, db) })
			key := ormlock.Name("webui-hidden-" + t.Name())
			srv := serve(t, db, webui.WithLocks(key))
			err = sqllock.Session(t.Context(), testdb.Open(t, k), key, func(ctx context.Context) error {
				code, body, _ := get(t, srv, "/")
				if code != http.StatusOK {
					t.Fatalf("GET /: %d\n%s", code, body)
				}
				mustContain(t, body, map[string]string{"postgres": ">PostgreSQL<", "mysql": ">MySQL/MariaDB<"}[k.Dialect()], `status held">held<`)
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		})
	}
}
