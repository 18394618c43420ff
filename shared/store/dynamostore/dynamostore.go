// Package dynamostore is the store.Store adapter on Amazon DynamoDB: one
// on-demand table with string keys PK and SK, three global secondary
// indexes, and every expression built with the SDK's expression builder, so
// no kind, tag, key, id or worker is ever spliced into an expression string
// (names that embed data, like a segment slot or an open-map key, are
// placeholders too).
//
// # Items
//
//	item          PK              SK          attributes
//	job           J#<id>          J           kind, state, lsk, spec (JSON), channel, uk, parent, error, result,
//	                                          created_at, updated_at, run_at, started_at, sliced_at, finished_at (epoch ms);
//	                                          dpk "S", dsk while scheduled with a RunAt;
//	                                          flow, dp, dx, and fu, fpk, fsk while a follow-up is pending (flow.go)
//	accounting    J#<id>          A           o (map: open segment → 1), hb (number set of 256-segment blocks), rv,
//	                                          sl, ct, it (sliced, totals), cd, cf, idn, ifl, rt (rolled-up counts)
//	segment       J#<id>#G#<k>    G           r<x> run entry, f<x> failed items, h<x> retries (x: one hex digit), z size
//	chunk record  J#<id>          C#<i:019d>  at (list of attempt JSON), st, items, up; ra, task, dpk "R", dsk while parked
//	unique key    U#<key>         U           job
//	tag           T#<tag>         <lsk>       id, tk (the job's kind)
//	dependency    J#<dep>         D#<id>      dependant; res once resolved (flow.go)
//
// lsk is "<CreatedAt in epoch ms, 13 digits>#<id>": newest first is lsk
// descending, which is id order for ULIDs minted from CreatedAt (as the
// engine does). Times are stored as epoch milliseconds and come back in UTC,
// truncated to the millisecond; durations are kept to the nanosecond.
//
// The job's immutable fields (args, input, tags, chunk size, max attempts,
// tolerated failures) are one JSON attribute; everything that is filtered on
// or changes is a typed attribute. Counters live in a separate small
// accounting item, so accounting writes cost one write unit whatever the
// size of the job's arguments, and they touch no index.
//
// # Accounting
//
// Chunk index i belongs to segment k = i/16 at slot x = i%16. A segment is
// its own partition, so a job's chunk completions spread over many
// partitions and none of them is hot. A chunk is terminal when its segment
// holds r<x> (succeeded; a run entry "started|duration|items|updated|worker"
// in base 36, ~40 bytes) or f<x> (failed; its items). h<x> counts the
// chunk's recorded retries, so the N of a terminal attempt is h+1 and the
// fast path knows from the segment alone whether the chunk has a record.
// Per-slot attributes, rather than number sets of done and failed indexes
// beside counters, make the not-terminal condition attribute_not_exists on
// two names and leave no derived value to keep consistent: the segment's
// counts are computed from its slots.
//
//   - A successful attempt is ONE UpdateItem of the segment: SET r<x>, on
//     condition that the segment exists, r<x> and f<x> do not, and x is
//     within the last segment's size z. ALL_NEW tells whether the segment is
//     now full and whether the chunk has a history (whose record's parking
//     it then clears, with a second UpdateItem). On a failed condition the
//     ALL_OLD item tells "segment missing" from "already terminal"
//     (Applied false, nothing written); a retried request whose first try
//     was applied finds its own run entry and counts as applied.
//   - The first write to a segment creates it in a TransactWriteItems that
//     also registers k in the accounting item's open map o (and its block
//     in hb, for ListChunks). A segment therefore never exists
//     unregistered, and is registered exactly once, before any of its
//     chunks counts.
//   - Retries and failed outcomes (rare) are transactions of the segment
//     (ADD h<x> 1, or SET f<x>; same not-terminal condition) and the chunk
//     record (attempt history with errors and stacks, parking), plus the
//     registration when they create the segment. Retries are counted in
//     the segment, not on the job: a job whose chunks all retry writes no
//     hot item either.
//   - Roll-up: when a segment is full (16 terminal chunks, or z on the last
//     one), whoever sees it (the worker whose write filled it, or SetSliced,
//     which sets z) adds its counts to the accounting item and removes k
//     from o, in ONE UpdateItem conditional on k being in o. A full segment
//     never changes again, so whoever computes the counts computes the same
//     ones, and the condition makes the roll-up happen once (a lost answer
//     that the SDK retries fails the condition and is taken as done).
//
// This improves on the design with a transactional roll-up and a "rolled"
// flag on the segment: o is the single source of truth (k in o ⇔ the
// segment's counts are not in the accounting item yet), and since k enters o
// only in the transaction that creates the segment, a rolled-up k can never
// come back. The roll-up is then a plain conditional write: one write unit
// instead of a four-unit transaction, and no segment write.
//
// GetJob reads the job and accounting items, then the segments in o
// (consistent BatchGetItem), and adds them up; then it re-reads o. If a
// summed segment has left o meanwhile (a roll-up between the two reads: its
// counts may or may not be in the accounting item read), it reads again.
// Counters are therefore exact for every write that has returned, and
// Counters.Accounted turns true with the last chunk whether or not its
// segment is rolled up yet. Settle repairs what a crash between two writes
// can leave: a full segment not rolled up (which only costs GetJob a read),
// and a chunk that succeeded after retries whose record is still parked.
//
// Cost (measured by the tests with item sizes as DynamoDB bills them): a
// successful chunk is one conditional write of one write unit (a full
// segment with worker names of ~17 bytes is 630 bytes). Each segment of 16
// chunks adds its creation (a failed conditional write and a two-item
// transaction: 1 + 4 units) and its roll-up (1 unit): about 1.36 units per
// chunk in all. The job's items are written twice per segment (creation,
// roll-up), never per chunk. A duplicate delivery that reaches
// RecordAttempt costs one failed conditional write (1 unit); the engine
// avoids most by reading the chunk first.
//
// # Listing
//
// ListJobs never scans. It queries one of:
//
//   - ByParent (parent, lsk), sparse: any query with a parent (the children
//     of one job; REPLACE's lineage). The job item carries its parent, so
//     the index costs no item in CreateJob's or ReplaceChunk's transaction.
//   - the tag items T#<tag> (base table, consistent): other queries with a
//     tag.
//   - ByState (state, lsk) for a non-terminal state: that partition holds
//     only the active jobs, so the sweeper's UpdatedBefore queries filter a
//     small set, newest first.
//   - ByKind (kind, lsk): other queries with a kind.
//   - ByState for a terminal state.
//   - ByState over every state, merged newest first: no kind, tag or state.
//   - Due (dpk "S", dsk "<RunAt ms>#<id>"), sparse: only scheduled jobs with
//     a RunAt carry it, and a transition out of scheduled removes it. State
//     scheduled with RunAtBefore (the sweeper) reads just the due jobs and
//     sorts them newest first; above 2,000 due jobs it falls back to the
//     ByState partition with a filter.
//
// Ordering every index by lsk rather than UpdatedAt or RunAt keeps "newest
// first" exact for every query, and a single cursor (the lsk of the last job
// returned, base64url; a malformed one is job.ErrInvalid) valid on all of
// them. CreatedAfter, CreatedBefore and the cursor are key conditions on
// lsk; the other filters are FilterExpressions on the attributes the index
// projects (state, kind, updated_at, run_at). The jobs found are read
// consistently with their counters and checked against the whole query
// again, so an index entry lagging behind a transition is never returned.
// Pages are filled up to the limit, querying further as needed.
//
// Due also holds parked chunk records (dpk "R", dsk
// "<RetryAt ms>#<job>#<index>"), so DueRetries is a key-range query, oldest
// first, checked against the chunk read consistently. ListChunks reads the
// segments in order from the cursor, up to the last sliced one (while
// slicing goes on, to the end of the highest block in hb), and the records
// of the chunks with a history.
//
// The index partitions per state, the Due partitions and the tag partitions
// take job-level writes only (creation, transitions); no chunk write touches
// an index.
//
// # Emulators
//
// The tests run against MiniStack and moto, which both implement what this
// package relies on: conditional writes with ALL_OLD items on failure,
// transaction cancellation reasons with items, nested map paths, sparse
// GSIs and consistent BatchGetItem. Where a failed condition comes back
// without the item, the adapter reads it, which is correct on DynamoDB too.
// moto's TransactWriteItems snapshots the table and restores the snapshot
// when it cancels, so concurrent requests lose their writes; the tests
// serialise requests to moto (DynamoDB's per-request isolation), and give
// moto a table per suite subtest because the snapshot costs O(table size).
package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/slicework/slicework/shared/clock"
	"github.com/slicework/slicework/shared/store"
)

// Table key attributes: both are strings.
const (
	AttrPK = "PK"
	AttrSK = "SK"
)

// Index names and the attributes that key them (all strings).
const (
	// IndexByKind lists a kind's jobs newest first: AttrKind, AttrListKey.
	IndexByKind = "ByKind"
	// IndexByState lists a state's jobs newest first: AttrState, AttrListKey.
	IndexByState = "ByState"
	// IndexByParent lists a job's children newest first: AttrParent,
	// AttrListKey. Sparse: only jobs with a parent carry AttrParent.
	IndexByParent = "ByParent"
	// IndexDue holds scheduled jobs by RunAt and parked chunks by RetryAt:
	// AttrDuePK, AttrDueSK. Sparse: only those items carry the attributes.
	IndexDue = "Due"

	// AttrKind is the job's kind.
	AttrKind = "kind"
	// AttrState is the job's state.
	AttrState = "state"
	// AttrParent is the id of the job's parent, absent if it has none.
	AttrParent = attrParent
	// AttrListKey is "<CreatedAt epoch ms, 13 digits>#<id>".
	AttrListKey = "lsk"
	// AttrDuePK is "S" on a scheduled job with a RunAt, "R" on a parked chunk.
	AttrDuePK = "dpk"
	// AttrDueSK is "<RunAt ms>#<id>" or "<RetryAt ms>#<job id>#<index>".
	AttrDueSK = "dsk"
	// AttrTTL is the name reserved for an epoch-seconds expiry attribute.
	// The store writes it on no item yet (jobs are kept forever); the table
	// may already enable TTL on it so that retention can be added later.
	AttrTTL = "expires_at"
)

// SegmentSize is the number of chunks that share one segment item.
const SegmentSize = 16

// Index describes one global secondary index: its key attributes (strings)
// and the non-key attributes it projects (projection INCLUDE).
type Index struct {
	// Name is the index name.
	Name string
	// PartitionKey and SortKey are string attributes.
	PartitionKey string
	SortKey      string
	// NonKeyAttributes are projected besides the table and index keys.
	NonKeyAttributes []string
}

// TableSchema is everything an infrastructure definition needs to create a
// table this package can use: string keys PartitionKey and SortKey,
// on-demand billing, Indexes, and TTLAttribute (optional to enable).
type TableSchema struct {
	// PartitionKey and SortKey are the table's string key attributes.
	PartitionKey string
	SortKey      string
	// Indexes are the global secondary indexes, all projection INCLUDE.
	Indexes []Index
	// TTLAttribute is reserved for retention (see AttrTTL).
	TTLAttribute string
}

// Schema returns the table's schema. The CDK stack mirrors it exactly.
func Schema() TableSchema {
	return TableSchema{
		PartitionKey: AttrPK,
		SortKey:      AttrSK,
		Indexes: []Index{
			{Name: IndexByKind, PartitionKey: AttrKind, SortKey: AttrListKey, NonKeyAttributes: []string{AttrState, attrUpdated, attrRunAt}},
			{Name: IndexByState, PartitionKey: AttrState, SortKey: AttrListKey, NonKeyAttributes: []string{AttrKind, attrUpdated, attrRunAt}},
			{Name: IndexByParent, PartitionKey: AttrParent, SortKey: AttrListKey, NonKeyAttributes: []string{AttrKind, AttrState, attrUpdated, attrRunAt}},
			{Name: IndexDue, PartitionKey: AttrDuePK, SortKey: AttrDueSK, NonKeyAttributes: []string{AttrListKey, AttrKind, attrUpdated}},
			{Name: IndexFollowUps, PartitionKey: AttrFollowPK, SortKey: AttrFollowSK, NonKeyAttributes: []string{attrFollowUp}},
		},
		TTLAttribute: AttrTTL,
	}
}

// CreateTableInput returns the CreateTable request for Schema, on-demand.
func CreateTableInput(name string) *dynamodb.CreateTableInput {
	sc := Schema()
	defs := map[string]bool{sc.PartitionKey: true, sc.SortKey: true}
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(name),
		BillingMode: types.BillingModePayPerRequest,
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(sc.PartitionKey), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(sc.SortKey), KeyType: types.KeyTypeRange},
		},
	}
	for _, ix := range sc.Indexes {
		defs[ix.PartitionKey], defs[ix.SortKey] = true, true
		in.GlobalSecondaryIndexes = append(in.GlobalSecondaryIndexes, types.GlobalSecondaryIndex{
			IndexName: aws.String(ix.Name),
			KeySchema: []types.KeySchemaElement{
				{AttributeName: aws.String(ix.PartitionKey), KeyType: types.KeyTypeHash},
				{AttributeName: aws.String(ix.SortKey), KeyType: types.KeyTypeRange},
			},
			Projection: &types.Projection{ProjectionType: types.ProjectionTypeInclude, NonKeyAttributes: ix.NonKeyAttributes},
		})
	}
	for _, name := range []string{sc.PartitionKey, sc.SortKey, AttrKind, AttrState, AttrListKey, AttrParent, AttrDuePK, AttrDueSK, AttrFollowPK, AttrFollowSK} {
		if defs[name] {
			in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{
				AttributeName: aws.String(name), AttributeType: types.ScalarAttributeTypeS,
			})
		}
	}
	return in
}

// CreateTable creates table name with Schema if it does not exist and waits
// until the table and its indexes are ACTIVE. It is idempotent; an existing
// table that lacks one of the indexes is an error. The wait is bounded by
// ctx and by five minutes.
func CreateTable(ctx context.Context, client *dynamodb.Client, name string) error {
	_, err := client.CreateTable(ctx, CreateTableInput(name))
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("dynamostore: create table %s: %w", name, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	for {
		out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
		if err != nil {
			return fmt.Errorf("dynamostore: create table %s: describe: %w", name, err)
		}
		active := out.Table.TableStatus == types.TableStatusActive
		have := map[string]bool{}
		for _, ix := range out.Table.GlobalSecondaryIndexes {
			have[aws.ToString(ix.IndexName)] = true
			active = active && ix.IndexStatus == types.IndexStatusActive
		}
		for _, ix := range Schema().Indexes {
			if !have[ix.Name] {
				return fmt.Errorf("dynamostore: table %s exists without index %s", name, ix.Name)
			}
		}
		if active {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("dynamostore: create table %s: waiting for ACTIVE: %w", name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Store is a job store in one DynamoDB table. It implements store.Store and
// is safe for concurrent use, also by many processes sharing the table.
type Store struct {
	db    *dynamodb.Client
	table string
	clock clock.Clock

	// dueCap is how many due scheduled jobs ListJobs reads through the Due
	// index before it falls back to the ByState partition.
	dueCap int

	// crash, when set (tests only), is called at the points where a process
	// could die between two writes; a non-nil error aborts the call there.
	crash func(point string) error
}

var _ store.Store = (*Store)(nil)

// Option configures a Store.
type Option func(*Store)

// WithClock makes the store read c for every time it sets itself: a job's
// UpdatedAt and SlicedAt and a chunk's UpdatedAt. The default is clock.System.
func WithClock(c clock.Clock) Option {
	return func(s *Store) { s.clock = c }
}

// New returns a store on table, which must have Schema (see CreateTable).
// It makes no call.
func New(client *dynamodb.Client, table string, opts ...Option) *Store {
	s := &Store{db: client, table: table, clock: clock.System{}, dueCap: dueCap}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Close releases nothing: the client belongs to the caller. It returns nil.
func (s *Store) Close() error { return nil }

// crashPoint reports the test hook's verdict at a crash point.
func (s *Store) crashPoint(point string) error {
	if s.crash == nil {
		return nil
	}
	return s.crash(point)
}
