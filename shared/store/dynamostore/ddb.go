package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// maxConflictRetries bounds how often a write that collided with a
// concurrent transaction on the same item is tried again.
const maxConflictRetries = 12

// isConflict reports whether err is worth retrying at once: a collision
// with a concurrent transaction (TransactionConflictException), or a
// cancelled transaction whose reasons are only conflicts or throttling (no
// failed condition).
func isConflict(err error) bool {
	var tc *types.TransactionConflictException
	if errors.As(err, &tc) {
		return true
	}
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return false
	}
	conflict := false
	for _, r := range tce.CancellationReasons {
		switch aws.ToString(r.Code) {
		case "", "None":
		case "TransactionConflict", "ThrottlingError", "ProvisionedThroughputExceeded":
			conflict = true
		default:
			return false
		}
	}
	return conflict
}

// retry calls fn until it returns something other than a conflict, with
// jittered exponential back-off, at most maxConflictRetries times.
func retry(ctx context.Context, fn func() error) error {
	for attempt := 0; ; attempt++ {
		err := fn()
		if err == nil || !isConflict(err) || attempt >= maxConflictRetries {
			return err
		}
		if err := sleep(ctx, attempt); err != nil {
			return err
		}
	}
}

// sleep waits a jittered back-off for attempt (0-based): up to 5 ms × 2^n,
// capped at 500 ms.
func sleep(ctx context.Context, attempt int) error {
	d := min(5*time.Millisecond<<min(attempt, 10), 500*time.Millisecond)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(time.Duration(rand.Int64N(int64(d)) + 1)):
		return nil
	}
}

// condFailed returns the item of a failed single-item condition
// (ReturnValuesOnConditionCheckFailure ALL_OLD; empty if the item is
// missing) and whether err is such a failure.
func condFailed(err error) (map[string]types.AttributeValue, bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, true
	}
	return nil, false
}

// update is one UpdateItem built from the expression builder.
type update struct {
	key  map[string]types.AttributeValue
	upd  expression.UpdateBuilder
	cond *expression.ConditionBuilder
	// ret is the ReturnValues of the call (NONE if empty).
	ret types.ReturnValue
}

func (s *Store) buildUpdate(u update) (*dynamodb.UpdateItemInput, error) {
	b := expression.NewBuilder().WithUpdate(u.upd)
	if u.cond != nil {
		b = b.WithCondition(*u.cond)
	}
	ex, err := b.Build()
	if err != nil {
		return nil, fmt.Errorf("build expression: %w", err)
	}
	return &dynamodb.UpdateItemInput{
		TableName: aws.String(s.table), Key: u.key,
		UpdateExpression: ex.Update(), ConditionExpression: ex.Condition(),
		ExpressionAttributeNames: ex.Names(), ExpressionAttributeValues: ex.Values(),
		ReturnValues:                        u.ret,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}, nil
}

// updateItem runs u, retrying transaction conflicts. It returns the
// attributes asked for by u.ret.
func (s *Store) updateItem(ctx context.Context, u update) (map[string]types.AttributeValue, error) {
	in, err := s.buildUpdate(u)
	if err != nil {
		return nil, err
	}
	var out *dynamodb.UpdateItemOutput
	err = retry(ctx, func() error {
		var err error
		out, err = s.db.UpdateItem(ctx, in)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out.Attributes, nil
}

// txUpdate turns u into a transaction item.
func (s *Store) txUpdate(u update) (types.TransactWriteItem, error) {
	in, err := s.buildUpdate(u)
	if err != nil {
		return types.TransactWriteItem{}, err
	}
	return types.TransactWriteItem{Update: &types.Update{
		TableName: in.TableName, Key: in.Key, UpdateExpression: in.UpdateExpression,
		ConditionExpression: in.ConditionExpression, ExpressionAttributeNames: in.ExpressionAttributeNames,
		ExpressionAttributeValues: in.ExpressionAttributeValues, ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}, nil
}

// transact runs a TransactWriteItems, retrying conflicts. If a condition
// failed, it returns the cancellation reasons (one per item, in order) and
// a nil error; on success, nil and nil.
func (s *Store) transact(ctx context.Context, items []types.TransactWriteItem) ([]types.CancellationReason, error) {
	var reasons []types.CancellationReason
	err := retry(ctx, func() error {
		_, err := s.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
		var tce *types.TransactionCanceledException
		if errors.As(err, &tce) && !isConflict(err) {
			reasons = tce.CancellationReasons
			if len(reasons) != len(items) {
				return fmt.Errorf("transaction cancelled with %d reasons for %d items: %w", len(reasons), len(items), err)
			}
			return nil
		}
		return err
	})
	return reasons, err
}

// failedAt reports whether the transaction item at i failed its condition.
func failedAt(reasons []types.CancellationReason, i int) bool {
	return i < len(reasons) && aws.ToString(reasons[i].Code) == "ConditionalCheckFailed"
}

// keyString identifies an item by its key.
func keyString(key map[string]types.AttributeValue) string {
	return getS(key, AttrPK) + "\x00" + getS(key, AttrSK)
}

// batchGet reads the items with keys, strongly consistent, and returns them
// by keyString; missing items are absent. projection, if set, limits the
// attributes read (the key attributes are always included).
func (s *Store) batchGet(ctx context.Context, keys []map[string]types.AttributeValue, projection ...string) (map[string]map[string]types.AttributeValue, error) {
	out := make(map[string]map[string]types.AttributeValue, len(keys))
	seen := map[string]bool{}
	var pending []map[string]types.AttributeValue
	for _, k := range keys {
		if ks := keyString(k); !seen[ks] {
			seen[ks] = true
			pending = append(pending, k)
		}
	}
	var proj *string
	var names map[string]string
	if len(projection) > 0 {
		pb := expression.NamesList(expression.Name(AttrPK), expression.Name(AttrSK))
		for _, p := range projection {
			pb = pb.AddNames(expression.Name(p))
		}
		ex, err := expression.NewBuilder().WithProjection(pb).Build()
		if err != nil {
			return nil, fmt.Errorf("build projection: %w", err)
		}
		proj, names = ex.Projection(), ex.Names()
	}
	for attempt := 0; len(pending) > 0; {
		n := min(len(pending), 100)
		batch := pending[:n]
		pending = pending[n:]
		res, err := s.db.BatchGetItem(ctx, &dynamodb.BatchGetItemInput{RequestItems: map[string]types.KeysAndAttributes{
			s.table: {Keys: batch, ConsistentRead: aws.Bool(true), ProjectionExpression: proj, ExpressionAttributeNames: names},
		}})
		if err != nil {
			return nil, err
		}
		for _, item := range res.Responses[s.table] {
			out[keyString(item)] = item
		}
		if un := res.UnprocessedKeys[s.table].Keys; len(un) > 0 {
			pending = append(pending, un...)
			if err := sleep(ctx, attempt); err != nil {
				return nil, err
			}
			attempt++
		}
	}
	return out, nil
}

// getItem reads one item, strongly consistent; nil if it is missing.
func (s *Store) getItem(ctx context.Context, key map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
	out, err := s.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(s.table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return nil, err
	}
	if len(out.Item) == 0 {
		return nil, nil
	}
	return out.Item, nil
}

// queryBefore is the query of a sparse time index (key pk in attribute
// pkAttr, sort key the 13-digit time in skAttr) for every entry at or
// before ms; limit 0 leaves the page size to DynamoDB.
func (s *Store) queryBefore(index, pkAttr, pk, skAttr string, ms int64, limit int) (*dynamodb.QueryInput, error) {
	kc := expression.Key(pkAttr).Equal(expression.Value(pk)).
		And(expression.Key(skAttr).LessThan(expression.Value(key13(min(ms, maxKeyTime-1) + 1))))
	ex, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, fmt.Errorf("build query: %w", err)
	}
	in := &dynamodb.QueryInput{
		TableName: aws.String(s.table), IndexName: aws.String(index),
		KeyConditionExpression: ex.KeyCondition(), ExpressionAttributeNames: ex.Names(), ExpressionAttributeValues: ex.Values(),
	}
	if limit > 0 {
		in.Limit = aws.Int32(int32(limit))
	}
	return in, nil
}
