package errs

import "fmt"

// CheckFenced is the check of a fenced write, written once for
// ormlock.CheckFenced and the adapters' forms: err when the statement
// failed, an error wrapping [ErrStaleToken] when rows reports no matched
// row, the error of rows when it cannot tell, and nil otherwise. rows is
// called only when err is nil.
func CheckFenced(err error, rows func() (int64, error)) error {
	if err != nil {
		return err
	}
	n, err := rows()
	if err != nil {
		return Wrap(err, "fenced write: rows affected")
	}
	if n == 0 {
		return fmt.Errorf("%w: the fenced write matched no row (its fence is greater than the token: a holder with a greater token has written it since; or the row does not exist)", ErrStaleToken)
	}
	return nil
}
