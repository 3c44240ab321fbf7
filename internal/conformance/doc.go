// Package conformance holds the cross-ORM conformance suite, in its tests
// only: one suite written against a small adapter interface and run for
// gormlock and entlock on every server, then gormlock, entlock and
// hand-written SQL contending for the same keys and ledger.
//
// It lives here, in a package no user imports, because `go mod tidy` in a
// user's module loads the tests of every package the user builds: a test of
// the root package (or of gormlock) that imported ent would make every GORM
// user download ent and atlas, and the reverse for ent users and GORM.
// scripts/consumer-check measures that.
package conformance
