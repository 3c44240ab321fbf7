package ormlock_test

import (
	"fmt"
	"log"
	"strings"

	"github.com/ormlock/ormlock"
)

// The tables Migrate creates, for a team that runs its own migrations.
func ExampleMigrateSQL() {
	stmts, err := ormlock.MigrateSQL("postgres", ormlock.WithLeaseTable("job_leases"))
	if err != nil {
		log.Fatal(err)
	}
	for _, s := range stmts {
		fmt.Println(strings.SplitN(s, "\n", 2)[0])
	}
	// Output:
	// CREATE TABLE IF NOT EXISTS "ormlock_runs" (
	// CREATE INDEX IF NOT EXISTS "ormlock_runs_ns_slot" ON "ormlock_runs" (namespace, slot)
	// CREATE TABLE IF NOT EXISTS "ormlock_runs_fence" (
	// CREATE TABLE IF NOT EXISTS "ormlock_runs_controls" (
	// CREATE TABLE IF NOT EXISTS "ormlock_runs_actions" (
	// CREATE INDEX IF NOT EXISTS "ormlock_runs_actions_ns_name" ON "ormlock_runs_actions" (namespace, name, id)
	// CREATE TABLE IF NOT EXISTS "job_leases" (
}
