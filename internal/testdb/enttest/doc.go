// Package enttest holds the ent schema used by ormlock's tests and examples
// (package schema) and the client ent generates from it (package ent, with
// the sql/execquery feature so that examples can run plain SQL in a
// transaction). Regenerate with go generate; the generator runs as
// go run entgo.io/ent/cmd/ent@v0.14.5, so it adds nothing to go.mod.
package enttest

//go:generate go run entgo.io/ent/cmd/ent@v0.14.5 generate --feature sql/execquery --target ./ent ./schema
