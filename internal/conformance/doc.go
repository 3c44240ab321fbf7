// Package conformance holds the cross-ORM conformance suite, in its tests
// only: one suite written against a small adapter interface and run for
// gormlock and entlock on every server (Transaction, Session, RunOnce,
// Holder, observer events), then gormlock, entlock and hand-written SQL
// contending for the same keys and ledger.
//
// It lives here, in a package no user imports, because `go mod tidy` in a
// user's module loads the tests of every package the user builds: a test of
// the root package that imported ent would make every GORM user download ent
// and atlas, and one that imported gormlock would make every ent user
// download GORM. So the GORM plugin's conformance against raw SQL, once the
// root's plugin_test.go, is here too. scripts/consumer-check measures it.
package conformance
