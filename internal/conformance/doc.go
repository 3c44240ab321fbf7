// Package conformance holds the cross-adapter conformance suite, in its
// tests only: one suite written against a small adapter interface and run
// for gormlock, entlock, sqllock and pgxlock on every server (Transaction,
// Session, RunOnce, Holder, Lead, fencing, observer events), then the
// adapters and hand-written SQL contending for the same keys and ledger.
//
// Every behaviour the adapters share is tested here, once, one concern per
// file (deadline_test.go, isolation_test.go, holder_test.go, fencing_test.go,
// runonce_test.go, session_test.go, ...), against the runner interface of
// runner_test.go; gormlock's and entlock's own tests keep only what is
// theirs (GORM's plugin, dbresolver, PrepareStmt and nested transactions;
// ent's Driver, Wrap and transactional clients; their error texts for a nil
// handle). Where the adapters differ by design, the test says so: claimInTx
// (claim mode's fn outside any transaction in gormlock, in one of its own in
// entlock).
//
// It lives here, in a package no user imports, because `go mod tidy` in a
// user's module loads the tests of every package the user builds: a test of
// the root package that imported ent would make every GORM user download ent
// and atlas, and one that imported gormlock would make every ent user
// download GORM. So the GORM plugin's conformance against raw SQL, once the
// root's plugin_test.go, is here too. scripts/consumer-check measures it.
package conformance
