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
// ErrStaleToken when rows reports no changed row, the error of rows when it
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
		return fmt.Errorf("%w: the resource has seen a newer holder's token; this holder's lock was lost", ErrStaleToken)
	}
	return nil
}
