package dynamostore_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/slicework/slicework/shared/awsconfig"
	"github.com/slicework/slicework/shared/emulator"
	"github.com/slicework/slicework/shared/store"
	"github.com/slicework/slicework/shared/store/dynamostore"
	"github.com/slicework/slicework/shared/store/storetest"
)

func TestMain(m *testing.M) { os.Exit(emulator.Run(m)) }

// testTable is the table every test on one emulator shares; tests isolate
// themselves by job ids, kinds, keys and tags.
const testTable = "slicework-test"

var (
	tablesMu sync.Mutex
	tables   = map[emulator.Kind]error{}
)

// serialTransport sends one request at a time. moto's TransactWriteItems
// snapshots the whole table and restores the snapshot when the transaction
// is cancelled, which under its threaded server erases writes that other
// requests made meanwhile; serialising the requests gives each one the
// isolation DynamoDB gives it. (MiniStack serialises under a lock itself.)
type serialTransport struct {
	mu   sync.Mutex
	next http.RoundTripper
}

func (t *serialTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	resp, err := t.next.RoundTrip(r)
	if err != nil {
		return nil, err
	}
	// Read the body under the lock too, so the next request starts after
	// this one has completely finished.
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

var motoHTTP = &http.Client{Transport: &serialTransport{next: http.DefaultTransport.(*http.Transport).Clone()}}

// httpClient returns the HTTP client for emulator k.
func httpClient(k emulator.Kind) *http.Client {
	if k == emulator.Moto {
		return motoHTTP
	}
	return nil
}

// newClient returns a DynamoDB client on emulator k with the test table
// created; optFns configure the client (middleware, for the counting tests).
func newClient(t testing.TB, k emulator.Kind, optFns ...func(*dynamodb.Options)) *dynamodb.Client {
	t.Helper()
	c := awsconfig.DynamoDB(emulator.Config(t, k, httpClient(k)), optFns...)
	tablesMu.Lock()
	defer tablesMu.Unlock()
	err, done := tables[k]
	if !done {
		err = dynamostore.CreateTable(context.Background(), c, testTable)
		tables[k] = err
	}
	if err != nil {
		t.Fatalf("create table on %s: %v", k, err)
	}
	return c
}

// TestConformance runs the store suite on both emulators. On MiniStack
// every subtest shares one table, as processes share one in production. On
// moto each subtest gets its own table, because moto copies the whole table
// for every transaction, which makes a shared table quadratic in time.
func TestConformance(t *testing.T) {
	for _, k := range emulator.Kinds {
		t.Run(string(k), func(t *testing.T) {
			t.Parallel()
			c := newClient(t, k)
			storetest.Run(t, func(t *testing.T) store.Store {
				if k != emulator.Moto {
					return dynamostore.New(c, testTable)
				}
				return dynamostore.New(c, freshTable(t, c))
			})
		})
	}
}

var tableSeq atomic.Int64

// freshTable creates a table for one test and deletes it afterwards.
func freshTable(t testing.TB, c *dynamodb.Client) string {
	t.Helper()
	name := fmt.Sprintf("slicework-test-%d-%d", os.Getpid(), tableSeq.Add(1))
	if err := dynamostore.CreateTable(context.Background(), c, name); err != nil {
		t.Fatalf("create table %s: %v", name, err)
	}
	t.Cleanup(func() {
		if _, err := c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)}); err != nil {
			t.Logf("delete table %s: %v", name, err)
		}
	})
	return name
}
