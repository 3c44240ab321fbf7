// Package ent is the ent client of the crondedup example, generated from
// package schema. Regenerate with go generate; the generator runs as
// go run entgo.io/ent/cmd/ent@v0.14.5, so it adds nothing to go.mod.
package ent

//go:generate go run entgo.io/ent/cmd/ent@v0.14.5 generate ./schema
