// Package fencectx carries a fencing token in a context.Context. It exists
// so that the lock protocol (internal/lockproto, which imports the root
// package) can set the token that the root package's FencingToken reads,
// without a public setter that would let any code forge one; and it holds
// the check of a fenced write (Check), written once for the root package's
// CheckFenced and the adapters' forms of it.
package fencectx

import "context"

type key struct{}

// With returns ctx carrying token.
func With(ctx context.Context, token int64) context.Context {
	return context.WithValue(ctx, key{}, token)
}

// From returns the token ctx carries, if any.
func From(ctx context.Context) (int64, bool) {
	if ctx == nil {
		return 0, false
	}
	t, ok := ctx.Value(key{}).(int64)
	return t, ok
}
