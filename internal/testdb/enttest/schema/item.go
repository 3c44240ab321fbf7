// Package schema is the ent schema of ormlock's tests and examples.
package schema

import (
	"entgo.io/ent"
	"entgo.io/ent/schema/field"
	"entgo.io/ent/schema/index"
)

// Item is a row written inside locked transactions: Owner names the test (or
// job) that wrote it, N is a counter or sequence number.
type Item struct {
	ent.Schema
}

// Fields of the Item.
func (Item) Fields() []ent.Field {
	return []ent.Field{
		field.String("owner").MaxLen(100),
		field.Int("n").Default(0),
	}
}

// Indexes of the Item.
func (Item) Indexes() []ent.Index {
	return []ent.Index{
		index.Fields("owner"),
	}
}
