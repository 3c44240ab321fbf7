package errs

import (
	"fmt"
	"reflect"
	"strings"
)

// CheckFenced is the check of a fenced write, written once for ormlock.CheckFenced
// and the adapters' forms: err when the statement failed, an error wrapping
// ErrStaleToken when rows reports no matched row, the error of rows when it
// cannot tell, and nil otherwise. rows is called only when err is nil. The
// server's dialect is unknown, so a refusal names the MySQL/MariaDB cause as
// one of its own; CheckFencedOn says it for the server the write went to.
func CheckFenced(err error, rows func() (int64, error)) error {
	return CheckFencedOn("", err, rows)
}

// CheckFencedOn is CheckFenced for a write sent to a server of dialect ("postgres",
// "mysql", or "" when not known): only MySQL/MariaDB count the rows an UPDATE
// changed instead of those it matched unless the DSN sets
// clientFoundRows=true, so only there (or when the dialect is not known)
// does a refusal name that cause.
func CheckFencedOn(dialect string, err error, rows func() (int64, error)) error {
	if err != nil {
		return err
	}
	n, err := rows()
	if err != nil {
		return Wrap(err, "fenced write: rows affected")
	}
	if n != 0 {
		return nil
	}
	const stale = "the fenced write matched no row (its fence is greater than the token: a holder with a greater token has written it since; or the row does not exist"
	switch dialect {
	case "postgres":
		return fmt.Errorf("%w: %s)", ErrStaleToken, stale)
	case "mysql":
		return fmt.Errorf("%w: %s; or the write changed no value and the DSN lacks clientFoundRows=true: MySQL/MariaDB then report the rows changed, not those matched, so add clientFoundRows=true to the DSN)", ErrStaleToken, stale)
	}
	return fmt.Errorf("%w: %s; or, on MySQL/MariaDB, the write changed no value and the DSN lacks clientFoundRows=true, without which the server reports the rows changed, not those matched)", ErrStaleToken, stale)
}

// ResultDialect returns the dialect of the driver that produced res, a
// database/sql result: "mysql" for go-sql-driver/mysql's, "postgres" for
// pgx's stdlib's or lib/pq's (driver.RowsAffected), "" when it cannot tell
// (a wrapping driver's own result, another driver). database/sql hides the driver's result in an unexported field;
// only its type is read.
func ResultDialect(res any) string {
	v := reflect.ValueOf(res)
	for v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return ""
	}
	for i := range v.NumField() {
		f := v.Field(i)
		if f.Kind() != reflect.Interface || f.IsNil() {
			continue
		}
		t := f.Elem().Type()
		if t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch p := t.PkgPath(); {
		case p == "github.com/go-sql-driver/mysql":
			return "mysql"
		case strings.HasPrefix(p, "github.com/jackc/pgx/"), p == "github.com/lib/pq",
			// pgx's stdlib and lib/pq answer with driver.RowsAffected,
			// which go-sql-driver/mysql never does
			p == "database/sql/driver" && t.Name() == "RowsAffected":
			return "postgres"
		}
	}
	return ""
}
