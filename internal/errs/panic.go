package errs

import "fmt"

// PanicError is ormlock.PanicError (its documentation is there).
type PanicError struct {
	Value  any
	Goexit bool
}

func (e *PanicError) Error() string {
	if e.Goexit {
		return Prefix + "fn called runtime.Goexit"
	}
	return fmt.Sprintf("%sfn panicked: %v", Prefix, e.Value)
}

// Panicked is the PanicError of recovered, what recover returned in a
// deferred call of a function that did not return: nil means the
// goroutine is exiting (runtime.Goexit), since a panic(nil) is recovered
// as a *runtime.PanicNilError.
func Panicked(recovered any) *PanicError {
	if recovered == nil {
		return &PanicError{Goexit: true}
	}
	return &PanicError{Value: recovered}
}
