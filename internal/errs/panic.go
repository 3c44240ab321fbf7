package errs

import "fmt"

// PanicError is ormlock.PanicError (its documentation is there).
type PanicError struct {
	// Value is the value the panic was raised with, as recover returned
	// it; nil for runtime.Goexit.
	Value any
	// Goexit is true when fn called runtime.Goexit (testing's t.FailNow,
	// say) rather than panicking.
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
