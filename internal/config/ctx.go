package config

import "context"

type tokenKey struct{}

// WithToken returns ctx carrying the fencing token of the lock fn runs
// under. Only the lock protocol sets it; ormlock.FencingToken reads it
// ([Token]), so no public setter lets code forge a token.
func WithToken(ctx context.Context, token int64) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

// Token returns the fencing token ctx carries, if any.
func Token(ctx context.Context) (int64, bool) {
	if ctx == nil {
		return 0, false
	}
	t, ok := ctx.Value(tokenKey{}).(int64)
	return t, ok
}
