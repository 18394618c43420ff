package main

import "github.com/slicework/slicework/shared/store/dynamostore"

// TableSchema is the shape of the job table that the DynamoDB job store
// (shared/store/dynamostore) reads and writes: key attributes, global
// secondary indexes and the TTL attribute. The stack creates exactly this
// table; the store must agree with it, so it has one source.
type TableSchema struct {
	// PartitionKey and SortKey are the table's primary key.
	PartitionKey KeyAttribute
	SortKey      KeyAttribute
	// TTLAttribute names the attribute holding an item's expiry time (epoch
	// seconds); DynamoDB deletes expired items. Empty: no TTL.
	TTLAttribute string
	// Indexes are the global secondary indexes, in creation order.
	Indexes []IndexSchema
}

// KeyAttribute is a key attribute: its name and type ("S", "N" or "B").
type KeyAttribute struct {
	Name string
	Type string
}

// IndexSchema is one global secondary index.
type IndexSchema struct {
	Name         string
	PartitionKey KeyAttribute
	// SortKey is optional (zero Name: none).
	SortKey KeyAttribute
	// Projection is "ALL", "KEYS_ONLY" or "INCLUDE".
	Projection string
	// NonKeyAttributes are the projected attributes of an INCLUDE index.
	NonKeyAttributes []string
}

// JobTableSchema returns the job table's schema: the one the DynamoDB job
// store declares (dynamostore.Schema), in the stack's terms. Every key
// attribute is a string and every index projects the attributes the store
// lists for it.
func JobTableSchema() TableSchema {
	src := dynamostore.Schema()
	s := func(name string) KeyAttribute { return KeyAttribute{Name: name, Type: "S"} }
	out := TableSchema{
		PartitionKey: s(src.PartitionKey),
		SortKey:      s(src.SortKey),
		TTLAttribute: src.TTLAttribute,
	}
	for _, ix := range src.Indexes {
		is := IndexSchema{Name: ix.Name, PartitionKey: s(ix.PartitionKey), Projection: "KEYS_ONLY"}
		if ix.SortKey != "" {
			is.SortKey = s(ix.SortKey)
		}
		if len(ix.NonKeyAttributes) > 0 {
			is.Projection, is.NonKeyAttributes = "INCLUDE", ix.NonKeyAttributes
		}
		out.Indexes = append(out.Indexes, is)
	}
	return out
}
