package lockproto_test

// pgx's connections, for every test of the package, the internal ones too
// (they share this test binary): internal/pgxdriver registers itself with
// lockproto when it is linked, as internal/verbs links it for the library.
import _ "github.com/ormlock/ormlock/internal/pgxdriver"
