package fencectx

import (
	"errors"
	"fmt"

	"github.com/ormlock/ormlock/internal/errs"
)

// ErrStaleToken is ormlock.ErrStaleToken, defined here so that the one
// check of a fenced write below can return it.
var ErrStaleToken = errors.New("ormlock: stale fencing token")

// Check is the check of a fenced write, written once for ormlock.CheckFenced
// and the adapters' forms: err when the statement failed, an error wrapping
// ErrStaleToken when rows reports no matched row, the error of rows when it
// cannot tell, and nil otherwise. rows is called only when err is nil.
func Check(err error, rows func() (int64, error)) error {
	if err != nil {
		return err
	}
	n, err := rows()
	if err != nil {
		return errs.Wrap(err, "fenced write: rows affected")
	}
	if n == 0 {
		return fmt.Errorf("%w: the fenced write matched no row (its fence is greater than the token: a holder with a greater token has written it since; or the row does not exist)", ErrStaleToken)
	}
	return nil
}
