// Package awsmetrics counts AWS SDK requests with client middleware: per
// service and operation, the calls made, the HTTP attempts they took (retries
// included), the calls that failed, and for DynamoDB the read and write
// capacity units consumed. Attach a Counter to an aws.Config and every client
// built from that config is counted; Snapshot reads the tallies.
//
// For DynamoDB, every request whose input has a ReturnConsumedCapacity field
// left empty is sent with TOTAL, so the service reports what it consumed. The
// caller's input is copied, never modified.
package awsmetrics

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
)

// Row is the tally of one service operation, or a sum of rows.
type Row struct {
	// Service is the SDK's service ID ("S3", "SQS", "DynamoDB").
	Service string
	// Operation is the API operation name ("PutObject").
	Operation string
	// Calls counts operation invocations (one per client method call).
	Calls int64
	// Attempts counts HTTP attempts, retries included; a call that fails
	// before its first attempt (such as input validation) makes none.
	Attempts int64
	// Errors counts calls that returned an error.
	Errors int64
	// RCU and WCU are the DynamoDB read and write capacity units the calls
	// reported as consumed.
	RCU, WCU float64
	// Estimated counts the successful reads whose response reported no
	// capacity although it was asked for (some emulators omit it for
	// BatchGetItem and TransactGetItems). Their RCU are estimated from the
	// request as DynamoDB bills an item of up to 4 KB: 1 unit per strongly
	// consistent read, 0.5 per eventually consistent one, 2 per
	// transactional one.
	Estimated int64
}

func (r Row) zero() bool {
	return r.Calls == 0 && r.Attempts == 0 && r.Errors == 0 && r.RCU == 0 && r.WCU == 0 && r.Estimated == 0
}

func (r *Row) add(o Row) {
	r.Calls += o.Calls
	r.Attempts += o.Attempts
	r.Errors += o.Errors
	r.RCU += o.RCU
	r.WCU += o.WCU
	r.Estimated += o.Estimated
}

// Report is a snapshot of a Counter: one row per service operation that was
// used, sorted by service and then operation.
type Report struct {
	Rows []Row
}

// Get returns the row of service and operation, or a zero row with those
// names if there is none.
func (r Report) Get(service, operation string) Row {
	for _, row := range r.Rows {
		if row.Service == service && row.Operation == operation {
			return row
		}
	}
	return Row{Service: service, Operation: operation}
}

// Service returns the sum of the rows of service, with Operation empty.
func (r Report) Service(service string) Row {
	sum := Row{Service: service}
	for _, row := range r.Rows {
		if row.Service == service {
			sum.add(row)
		}
	}
	return sum
}

// Total returns the sum of every row, with Service empty and Operation
// "total".
func (r Report) Total() Row {
	sum := Row{Operation: "total"}
	for _, row := range r.Rows {
		sum.add(row)
	}
	return sum
}

// Sub returns the activity between earlier and r, two snapshots of the same
// Counter: each row is r's minus earlier's, and rows that did not change are
// left out. If the Counter was Reset in between, values can be negative.
func (r Report) Sub(earlier Report) Report {
	type key struct{ s, o string }
	rows := map[key]Row{}
	for _, row := range r.Rows {
		rows[key{row.Service, row.Operation}] = row
	}
	for _, e := range earlier.Rows {
		k := key{e.Service, e.Operation}
		d, ok := rows[k]
		if !ok {
			d = Row{Service: e.Service, Operation: e.Operation}
		}
		d.add(Row{Calls: -e.Calls, Attempts: -e.Attempts, Errors: -e.Errors, RCU: -e.RCU, WCU: -e.WCU, Estimated: -e.Estimated})
		rows[k] = d
	}
	var out Report
	for _, row := range rows {
		if !row.zero() {
			out.Rows = append(out.Rows, row)
		}
	}
	sortRows(out.Rows)
	return out
}

// WriteTable writes r as an aligned text table: service, operation, calls,
// attempts, errors, RCU and WCU (one decimal: DynamoDB capacity comes in
// halves), one line per row and a total line. It returns the first write
// error.
func (r Report) WriteTable(w io.Writer) error {
	header := []string{"SERVICE", "OPERATION", "CALLS", "ATTEMPTS", "ERRORS", "RCU", "WCU"}
	cells := [][]string{header}
	line := func(row Row) []string {
		return []string{row.Service, row.Operation,
			strconv.FormatInt(row.Calls, 10), strconv.FormatInt(row.Attempts, 10), strconv.FormatInt(row.Errors, 10),
			strconv.FormatFloat(row.RCU, 'f', 1, 64), strconv.FormatFloat(row.WCU, 'f', 1, 64)}
	}
	for _, row := range r.Rows {
		cells = append(cells, line(row))
	}
	total := r.Total()
	total.Service, total.Operation = "total", ""
	cells = append(cells, line(total))
	width := make([]int, len(header))
	for _, c := range cells {
		for i, s := range c {
			width[i] = max(width[i], len(s))
		}
	}
	var b strings.Builder
	for _, c := range cells {
		for i, s := range c {
			if i > 0 {
				b.WriteString("  ")
			}
			if i < 2 { // text columns left-aligned, numbers right-aligned
				fmt.Fprintf(&b, "%-*s", width[i], s)
			} else {
				fmt.Fprintf(&b, "%*s", width[i], s)
			}
		}
		b.WriteString("\n")
	}
	// Text columns are padded even at the end of a line; trim that.
	out := strings.ReplaceAll(b.String(), " \n", "\n")
	for strings.Contains(out, " \n") {
		out = strings.ReplaceAll(out, " \n", "\n")
	}
	if total.Estimated > 0 {
		out += fmt.Sprintf("(%d reads reported no capacity; their RCU are estimated from the request, as DynamoDB bills items of up to 4 KB)\n", total.Estimated)
	}
	_, err := io.WriteString(w, out)
	return err
}

func sortRows(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int {
		if c := strings.Compare(a.Service, b.Service); c != 0 {
			return c
		}
		return strings.Compare(a.Operation, b.Operation)
	})
}

type opKey struct{ service, operation string }

// Counter tallies the requests of the clients it is attached to. The zero
// value is not usable; call New. It is safe for concurrent use.
type Counter struct {
	mu   sync.Mutex
	rows map[opKey]*Row
	id   string
}

// New returns an empty Counter.
func New() *Counter {
	c := &Counter{rows: map[opKey]*Row{}}
	c.id = fmt.Sprintf("awsmetrics.%p", c)
	return c
}

// Attach adds the Counter's middleware to cfg.APIOptions, so that every
// client built from cfg afterwards is counted. cfg's option slice is copied,
// not appended to in place, so configs that share it are not affected.
// Attaching the same Counter twice counts once.
func (c *Counter) Attach(cfg *aws.Config) {
	cfg.APIOptions = append(slices.Clip(cfg.APIOptions), c.APIOptions)
}

// APIOptions adds the Counter's middleware to one operation's stack; it has
// the signature of an aws.Config.APIOptions (and every client Options'
// APIOptions) entry, for use without Attach. It adds nothing to a stack that
// already carries this Counter.
func (c *Counter) APIOptions(stack *middleware.Stack) error {
	if _, ok := stack.Initialize.Get(c.id + ".calls"); ok {
		return nil
	}
	if err := stack.Initialize.Add(callMiddleware{c}, middleware.Before); err != nil {
		return fmt.Errorf("awsmetrics: add call middleware: %w", err)
	}
	// After the retry middleware, this runs once per attempt. A stack without
	// one (there is none in the SDK's clients today) has a single attempt
	// per call, so the deserialize step counts the same.
	if err := stack.Finalize.Insert(attemptMiddleware{c}, "Retry", middleware.After); err != nil {
		if err := stack.Deserialize.Add(attemptDeserialize{c}, middleware.Before); err != nil {
			return fmt.Errorf("awsmetrics: add attempt middleware: %w", err)
		}
	}
	return nil
}

// Snapshot returns a copy of the current tallies.
func (c *Counter) Snapshot() Report {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := Report{Rows: make([]Row, 0, len(c.rows))}
	for _, row := range c.rows {
		r.Rows = append(r.Rows, *row)
	}
	sortRows(r.Rows)
	return r
}

// Reset sets every tally to zero. Calls in flight are counted from where they
// are: a call that began before Reset may show attempts but no call.
func (c *Counter) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rows = map[opKey]*Row{}
}

func (c *Counter) add(ctx context.Context, d Row) {
	k := opKey{middleware.GetServiceID(ctx), middleware.GetOperationName(ctx)}
	c.mu.Lock()
	defer c.mu.Unlock()
	row, ok := c.rows[k]
	if !ok {
		row = &Row{Service: k.service, Operation: k.operation}
		c.rows[k] = row
	}
	row.add(d)
}

type callMiddleware struct{ c *Counter }

func (m callMiddleware) ID() string { return m.c.id + ".calls" }

func (m callMiddleware) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	middleware.InitializeOutput, middleware.Metadata, error,
) {
	params, write, capacity := requestCapacity(in.Parameters)
	in.Parameters = params
	out, md, err := next.HandleInitialize(ctx, in)
	d := Row{Calls: 1}
	if err != nil {
		d.Errors = 1
	} else if capacity {
		d.RCU, d.WCU = consumed(out.Result, write)
		if d.RCU == 0 && d.WCU == 0 {
			if est, ok := estimatedReads(params); ok {
				d.RCU, d.Estimated = est, 1
			}
		}
	}
	m.c.add(ctx, d)
	return out, md, err
}

type attemptMiddleware struct{ c *Counter }

func (m attemptMiddleware) ID() string { return m.c.id + ".attempts" }

func (m attemptMiddleware) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
	middleware.FinalizeOutput, middleware.Metadata, error,
) {
	m.c.add(ctx, Row{Attempts: 1})
	return next.HandleFinalize(ctx, in)
}

type attemptDeserialize struct{ c *Counter }

func (m attemptDeserialize) ID() string { return m.c.id + ".attempts" }

func (m attemptDeserialize) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	middleware.DeserializeOutput, middleware.Metadata, error,
) {
	m.c.add(ctx, Row{Attempts: 1})
	return next.HandleDeserialize(ctx, in)
}

const total = ddbtypes.ReturnConsumedCapacityTotal

// requestCapacity returns the DynamoDB input params with ReturnConsumedCapacity
// set to TOTAL if it was empty (a copy; params itself is not changed),
// whether the operation writes, and whether it reports capacity at all.
// Other inputs (and the PartiQL operations) are returned as they are.
func requestCapacity(params any) (out any, write, capacity bool) {
	switch v := params.(type) {
	case *dynamodb.GetItemInput:
		return withTotal(v, func(c *dynamodb.GetItemInput) *rcc { return &c.ReturnConsumedCapacity }), false, true
	case *dynamodb.QueryInput:
		return withTotal(v, func(c *dynamodb.QueryInput) *rcc { return &c.ReturnConsumedCapacity }), false, true
	case *dynamodb.ScanInput:
		return withTotal(v, func(c *dynamodb.ScanInput) *rcc { return &c.ReturnConsumedCapacity }), false, true
	case *dynamodb.BatchGetItemInput:
		return withTotal(v, func(c *dynamodb.BatchGetItemInput) *rcc { return &c.ReturnConsumedCapacity }), false, true
	case *dynamodb.TransactGetItemsInput:
		return withTotal(v, func(c *dynamodb.TransactGetItemsInput) *rcc { return &c.ReturnConsumedCapacity }), false, true
	case *dynamodb.PutItemInput:
		return withTotal(v, func(c *dynamodb.PutItemInput) *rcc { return &c.ReturnConsumedCapacity }), true, true
	case *dynamodb.UpdateItemInput:
		return withTotal(v, func(c *dynamodb.UpdateItemInput) *rcc { return &c.ReturnConsumedCapacity }), true, true
	case *dynamodb.DeleteItemInput:
		return withTotal(v, func(c *dynamodb.DeleteItemInput) *rcc { return &c.ReturnConsumedCapacity }), true, true
	case *dynamodb.BatchWriteItemInput:
		return withTotal(v, func(c *dynamodb.BatchWriteItemInput) *rcc { return &c.ReturnConsumedCapacity }), true, true
	case *dynamodb.TransactWriteItemsInput:
		return withTotal(v, func(c *dynamodb.TransactWriteItemsInput) *rcc { return &c.ReturnConsumedCapacity }), true, true
	}
	return params, false, false
}

type rcc = ddbtypes.ReturnConsumedCapacity

// withTotal returns v if its ReturnConsumedCapacity field (which field
// addresses) is set, and otherwise a shallow copy of v with it set to TOTAL.
func withTotal[T any](v *T, field func(*T) *rcc) *T {
	if v == nil || *field(v) != "" {
		return v
	}
	cp := *v
	*field(&cp) = total
	return &cp
}

// consumed sums the capacity a DynamoDB output reports. Where an entry gives
// read or write units, those are used; where it gives only CapacityUnits (as
// single-item operations do), they count as writes for a write operation and
// as reads otherwise.
func consumed(result any, write bool) (rcu, wcu float64) {
	var list []ddbtypes.ConsumedCapacity
	switch v := result.(type) {
	case *dynamodb.GetItemOutput:
		list = one(v.ConsumedCapacity)
	case *dynamodb.QueryOutput:
		list = one(v.ConsumedCapacity)
	case *dynamodb.ScanOutput:
		list = one(v.ConsumedCapacity)
	case *dynamodb.PutItemOutput:
		list = one(v.ConsumedCapacity)
	case *dynamodb.UpdateItemOutput:
		list = one(v.ConsumedCapacity)
	case *dynamodb.DeleteItemOutput:
		list = one(v.ConsumedCapacity)
	case *dynamodb.BatchGetItemOutput:
		list = v.ConsumedCapacity
	case *dynamodb.BatchWriteItemOutput:
		list = v.ConsumedCapacity
	case *dynamodb.TransactGetItemsOutput:
		list = v.ConsumedCapacity
	case *dynamodb.TransactWriteItemsOutput:
		list = v.ConsumedCapacity
	}
	for _, cc := range list {
		switch {
		case cc.ReadCapacityUnits != nil || cc.WriteCapacityUnits != nil:
			rcu += aws.ToFloat64(cc.ReadCapacityUnits)
			wcu += aws.ToFloat64(cc.WriteCapacityUnits)
		case write:
			wcu += aws.ToFloat64(cc.CapacityUnits)
		default:
			rcu += aws.ToFloat64(cc.CapacityUnits)
		}
	}
	return rcu, wcu
}

// estimatedReads estimates the read units of a multi-item read whose
// response reported none, from its request (see Row.Estimated).
func estimatedReads(params any) (float64, bool) {
	switch v := params.(type) {
	case *dynamodb.BatchGetItemInput:
		var rcu float64
		for _, ka := range v.RequestItems {
			per := 0.5
			if aws.ToBool(ka.ConsistentRead) {
				per = 1
			}
			rcu += per * float64(len(ka.Keys))
		}
		return rcu, true
	case *dynamodb.TransactGetItemsInput:
		return 2 * float64(len(v.TransactItems)), true
	}
	return 0, false
}

func one(cc *ddbtypes.ConsumedCapacity) []ddbtypes.ConsumedCapacity {
	if cc == nil {
		return nil
	}
	return []ddbtypes.ConsumedCapacity{*cc}
}
