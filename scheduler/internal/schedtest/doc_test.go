// Package schedtest_test holds the scheduler module's tests on real
// servers. They live in a directory no program imports because `go mod
// tidy` in a user's module loads the tests of every package the user
// imports: tests in package scheduler that import GORM and ent (as these
// do) would make every GORM user of the scheduler download ent, and every
// ent user GORM (measured by scripts/consumer-check).
package schedtest_test
