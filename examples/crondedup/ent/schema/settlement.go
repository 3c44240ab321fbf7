// Package schema is the ent schema of the crondedup example: the table the
// "midnight" job writes to.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/dialect/entsql"
	"entgo.io/ent/schema"
	"entgo.io/ent/schema/field"
)

// Settlement is the work of one run of the job: one row per run, written in
// the same transaction as the run's ledger row. Job is the job's name, Slot
// the scheduled time (RFC 3339, UTC), RanBy the replica that ran it.
type Settlement struct {
	ent.Schema
}

// Annotations of the Settlement: the table is ent_settlements (the GORM
// variant of the example writes gorm_settlements; each ORM manages its own).
func (Settlement) Annotations() []schema.Annotation {
	return []schema.Annotation{entsql.Annotation{Table: "ent_settlements"}}
}

// Fields of the Settlement.
func (Settlement) Fields() []ent.Field {
	return []ent.Field{
		field.String("job").MaxLen(191),
		field.String("slot").MaxLen(40),
		field.String("ran_by").MaxLen(64),
	}
}
