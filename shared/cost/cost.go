// Package cost turns counted AWS requests into dollars: what slicework's
// orchestration costs per chunk, per 1,000 items and per million items,
// next to AWS Step Functions Distributed Map on the same job shape.
//
// Only orchestration is priced: queue, state and object requests and
// function invocations. The chunk handler's own compute (Lambda GB-seconds)
// is the same whichever system schedules it, and is left out of both sides;
// so are storage and data transfer.
package cost

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/slicework/slicework/shared/awsmetrics"
)

// Prices are on-demand list prices in US dollars.
type Prices struct {
	// Source says where and when the prices were read.
	Source string
	// SQSRequest is the price of one SQS request (each 64 KiB of payload
	// counts as one request; slicework's tasks are far smaller).
	SQSRequest float64
	// DynamoWRU and DynamoRRU are the prices of one write and one read
	// request unit, on-demand.
	DynamoWRU, DynamoRRU float64
	// S3Put is the price of one PUT, COPY, POST or LIST request; S3Get of
	// one GET, HEAD or other request (DELETE is free).
	S3Put, S3Get float64
	// LambdaRequest is the price of one function invocation.
	LambdaRequest float64
	// SFNTransition is the price of one Standard-workflow state transition.
	SFNTransition float64
	// SFNExpressRequest and SFNExpressGBSecond price Express workflows:
	// per execution, and per GB-second (billed at 64 MB and 100 ms minimum).
	SFNExpressRequest, SFNExpressGBSecond float64
}

// USEast1 are the on-demand prices in us-east-1.
var USEast1 = Prices{
	Source:             "AWS on-demand list prices, us-east-1, as of 2026-11 (DynamoDB after the Nov 2024 on-demand price cut)",
	SQSRequest:         0.40 / 1e6,
	DynamoWRU:          0.625 / 1e6,
	DynamoRRU:          0.125 / 1e6,
	S3Put:              0.005 / 1e3,
	S3Get:              0.0004 / 1e3,
	LambdaRequest:      0.20 / 1e6,
	SFNTransition:      0.025 / 1e3,
	SFNExpressRequest:  1.00 / 1e6,
	SFNExpressGBSecond: 0.00001667,
}

// Usage is what one job consumed.
type Usage struct {
	// Chunks and Items are the job's size.
	Chunks, Items int64
	// SQSRequests counts SQS API calls.
	SQSRequests float64
	// DynamoWRU and DynamoRRU are consumed write and read units.
	DynamoWRU, DynamoRRU float64
	// DynamoCalls counts DynamoDB API calls.
	DynamoCalls float64
	// S3Put and S3Get count S3 requests by price class.
	S3Put, S3Get float64
	// Invocations counts function invocations (slicer, worker, api).
	Invocations float64
	// ChunkSeconds is the mean handler time of one chunk, used to price
	// Express child workflows, which bill for their duration.
	ChunkSeconds float64
}

// Cost is Usage priced.
func (u Usage) Cost(p Prices) float64 {
	return u.SQSRequests*p.SQSRequest + u.DynamoWRU*p.DynamoWRU + u.DynamoRRU*p.DynamoRRU +
		u.S3Put*p.S3Put + u.S3Get*p.S3Get + u.Invocations*p.LambdaRequest
}

// DistributedMap prices the same job on Step Functions Distributed Map:
// one child workflow per chunk (an ItemBatcher of the same size), each
// running one Lambda task. Step Functions bills one state transition per
// child execution started; a Standard child adds its own transitions (the
// task state: one), an Express child instead bills a request and its
// duration (at least 64 MB and 100 ms). The parent's few transitions, the
// ItemReader's GETs and the ResultWriter's PUTs are a handful per job and
// left out, as are the Lambda invocations (one per child), counted in
// Invocations below.
type DistributedMap struct {
	Express bool
}

// Cost returns the Distributed Map orchestration cost of a job of u's
// shape, with one Lambda invocation per chunk.
func (d DistributedMap) Cost(u Usage, p Prices) float64 {
	chunks := float64(u.Chunks)
	c := chunks*p.SFNTransition + chunks*p.LambdaRequest
	if d.Express {
		seconds := math.Max(0.1, math.Ceil(u.ChunkSeconds*10)/10)
		c += chunks*p.SFNExpressRequest + chunks*seconds*0.064*p.SFNExpressGBSecond
	} else {
		c += chunks * p.SFNTransition
	}
	return c
}

// WriteTable prints u per chunk, per 1,000 items and per million items,
// priced with p, next to Distributed Map.
func WriteTable(w io.Writer, u Usage, p Prices) error {
	if u.Chunks <= 0 || u.Items <= 0 {
		return fmt.Errorf("cost: a job of %d chunks and %d items cannot be priced per chunk and item", u.Chunks, u.Items)
	}
	perChunk := func(v float64) float64 { return v / float64(u.Chunks) }
	perK := func(v float64) float64 { return v * 1000 / float64(u.Items) }
	perM := func(v float64) float64 { return v * 1e6 / float64(u.Items) }
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\t%10s\t%15s\t%19s\n", "per chunk", "per 1,000 items", "$ per million items")
	rows := []struct {
		name  string
		n     float64
		price float64
	}{
		{"SQS requests", u.SQSRequests, p.SQSRequest},
		{"DynamoDB write units", u.DynamoWRU, p.DynamoWRU},
		{"DynamoDB read units", u.DynamoRRU, p.DynamoRRU},
		{"S3 PUT/LIST requests", u.S3Put, p.S3Put},
		{"S3 GET/HEAD requests", u.S3Get, p.S3Get},
		{"Lambda invocations", u.Invocations, p.LambdaRequest},
	}
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%10.3f\t%15.3f\t%19s\n", r.name, perChunk(r.n), perK(r.n), dollars(perM(r.n*r.price)))
	}
	fmt.Fprintf(tw, "DynamoDB calls (all kinds)\t%10.3f\t%15.3f\t%19s\n", perChunk(u.DynamoCalls), perK(u.DynamoCalls), "")
	fmt.Fprintf(tw, "slicework total\t%10s\t%15s\t%19s\n", "", "", dollars(perM(u.Cost(p))))
	fmt.Fprintf(tw, "Step Functions Distributed Map, Standard children\t%10s\t%15s\t%19s\n", "", "", dollars(perM(DistributedMap{}.Cost(u, p))))
	fmt.Fprintf(tw, "Step Functions Distributed Map, Express children\t%10s\t%15s\t%19s\n", "", "", dollars(perM(DistributedMap{Express: true}.Cost(u, p))))
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "job shape: %d chunks, %d items (%.0f items per chunk); prices: %s\n", u.Chunks, u.Items, float64(u.Items)/float64(u.Chunks), p.Source)
	return err
}

// dollars prints v with two decimals from $1 up, else with five.
func dollars(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("$%.2f", v)
	}
	return fmt.Sprintf("$%.5f", v)
}

// s3Put lists the S3 operations billed at the PUT, COPY, POST, LIST rate;
// other S3 operations bill at the GET rate except DeleteObject(s), which is free.
var s3Put = map[string]bool{
	"PutObject": true, "CopyObject": true, "ListObjectsV2": true, "ListObjects": true, "ListBuckets": true,
	"CreateMultipartUpload": true, "UploadPart": true, "CompleteMultipartUpload": true, "CreateBucket": true,
}

// UsageFrom builds a Usage from the AWS requests a job made (the difference
// of two awsmetrics snapshots taken around it), its function invocations,
// its size, and its mean handler time per chunk. Requests are counted by
// HTTP attempt, as AWS bills them.
func UsageFrom(r awsmetrics.Report, invocations int, chunks, items int64, chunkSeconds float64) Usage {
	u := Usage{Chunks: chunks, Items: items, Invocations: float64(invocations), ChunkSeconds: chunkSeconds}
	for _, row := range r.Rows {
		switch row.Service {
		case "SQS":
			u.SQSRequests += float64(row.Attempts)
		case "DynamoDB":
			u.DynamoCalls += float64(row.Calls)
			u.DynamoWRU += row.WCU
			u.DynamoRRU += row.RCU
		case "S3":
			switch {
			case s3Put[row.Operation]:
				u.S3Put += float64(row.Attempts)
			case row.Operation == "DeleteObject" || row.Operation == "DeleteObjects" || row.Operation == "AbortMultipartUpload":
			default:
				u.S3Get += float64(row.Attempts)
			}
		}
	}
	return u
}
