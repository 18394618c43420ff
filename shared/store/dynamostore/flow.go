package dynamostore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/store"
)

// Dependencies and follow-ups (store.Flow).
//
//	item   PK           SK               attributes
//	job    J#<id>       J                flow (JSON: depends_on, run_anyway, callback_url), dp (pending
//	                                     dependencies), dx (first dependency failure);
//	                                     fu (follow-up token), fpk "F", fsk "<set ms>#<id>" while one is pending
//	edge   J#<dep>      D#<dependant>    dependant; res (token of the write that resolved it)
//
// An edge lives in its dependency's partition, so a terminal job lists its
// dependants with one consistent Query of the base table (SK begins with
// "D#"), never through an index. CreateJob writes the edges in the job's
// own transaction (one Put each) with dp = len(DependsOn).
//
// ResolveDependency is one TransactWriteItems of the edge (SET res,
// conditional on res being absent) and the dependant's job item (ADD dp -1,
// SET dx if absent): the edge's condition guards the decrement, so each
// edge counts exactly once, and no read is needed first (concurrent
// resolutions of one dependant's edges do not retry each other). A retried
// request whose first try was applied finds its own token in res.
//
// A pending follow-up puts the job item into the sparse FollowUps index
// (fpk, fsk), which only the sweeper reads, to find work that a crash left
// behind; the jobs it finds are read again consistently. Transition to a
// terminal state sets fu, fpk and fsk in its one UpdateItem; ClearFollowUp
// removes them on condition that fu is the caller's token. The index takes
// one write per terminal transition and one per clear: job-level writes.
const (
	attrFlow       = "flow"
	attrDepsPend   = "dp"
	attrDepFailure = "dx"
	attrFollowUp   = "fu"
	attrEdgeJob    = "dependant"
	attrResolved   = "res"

	// AttrFollowPK is "F" on a job with a pending follow-up.
	AttrFollowPK = "fpk"
	// AttrFollowSK is "<ms when the follow-up was set, 13 digits>#<id>".
	AttrFollowSK = "fsk"
	// IndexFollowUps holds the jobs with a pending follow-up, oldest first:
	// AttrFollowPK, AttrFollowSK. Sparse.
	IndexFollowUps = "FollowUps"

	followPK   = "F"
	edgePrefix = "D#"
)

// flowSpec is the JSON of a job's immutable flow fields.
type flowSpec struct {
	DependsOn   []string `json:"depends_on,omitempty"`
	RunAnyway   bool     `json:"run_anyway,omitempty"`
	CallbackURL string   `json:"callback_url,omitempty"`
}

func edgeKey(dep, dependant string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{AttrPK: avS(jobPK(dep)), AttrSK: avS(edgePrefix + dependant)}
}

func followSK(at time.Time, id string) string { return key13(at.UnixMilli()) + "#" + id }

// putFlow adds j's flow attributes to its new job item. j must pass
// store.CheckDependsOn; a FollowUp given counts as set at CreatedAt.
func putFlow(item map[string]types.AttributeValue, j *job.Job) error {
	for _, d := range j.DependsOn {
		if len(d) > maxKeyLen || strings.Contains(d, "#") {
			return fmt.Errorf("dependency id %.40q has '#' or is over %d bytes", d, maxKeyLen)
		}
	}
	if len(j.DependsOn) > 0 || j.RunAnyway || j.CallbackURL != "" {
		sp, err := json.Marshal(flowSpec{DependsOn: j.DependsOn, RunAnyway: j.RunAnyway, CallbackURL: j.CallbackURL})
		if err != nil {
			return err
		}
		item[attrFlow] = avS(string(sp))
	}
	if len(j.DependsOn) > 0 {
		item[attrDepsPend] = avN(int64(len(j.DependsOn)))
	}
	if j.DepFailure != "" {
		item[attrDepFailure] = avS(j.DepFailure)
	}
	if j.FollowUp != "" {
		item[attrFollowUp] = avS(j.FollowUp)
		item[AttrFollowPK] = avS(followPK)
		item[AttrFollowSK] = avS(followSK(j.CreatedAt, j.ID))
	}
	return nil
}

// edgePuts returns the Put of every dependency edge of new job j.
func (s *Store) edgePuts(j *job.Job) []types.TransactWriteItem {
	out := make([]types.TransactWriteItem, 0, len(j.DependsOn))
	for _, dep := range j.DependsOn {
		item := edgeKey(dep, j.ID)
		item[attrEdgeJob] = avS(j.ID)
		out = append(out, types.TransactWriteItem{Put: &types.Put{TableName: aws.String(s.table), Item: item}})
	}
	return out
}

// decodeFlow sets j's flow fields from its job item.
func decodeFlow(item map[string]types.AttributeValue, j *job.Job) error {
	if raw := getS(item, attrFlow); raw != "" {
		var sp flowSpec
		if err := json.Unmarshal([]byte(raw), &sp); err != nil {
			return fmt.Errorf("decode job %s: flow: %w", j.ID, err)
		}
		j.DependsOn, j.RunAnyway, j.CallbackURL = sp.DependsOn, sp.RunAnyway, sp.CallbackURL
	}
	dp, _, err := getN(item, attrDepsPend)
	if err != nil {
		return fmt.Errorf("decode job %s: %w", j.ID, err)
	}
	j.DepsPending = int(dp)
	j.DepFailure, j.FollowUp = getS(item, attrDepFailure), getS(item, attrFollowUp)
	return nil
}

// setFollowUp adds a new follow-up token to a job item's update.
func setFollowUp(upd expression.UpdateBuilder, id, token string, now time.Time) expression.UpdateBuilder {
	return upd.Set(expression.Name(attrFollowUp), expression.Value(token)).
		Set(expression.Name(AttrFollowPK), expression.Value(followPK)).
		Set(expression.Name(AttrFollowSK), expression.Value(followSK(now, id)))
}

// ResolveDependency implements store.Flow in one TransactWriteItems (see
// the layout above).
func (s *Store) ResolveDependency(ctx context.Context, dependant, dep, failure string) (store.Resolution, error) {
	fail := func(err error) (store.Resolution, error) {
		return store.Resolution{}, fmt.Errorf("dynamostore: resolve dependency %s of %s: %w", dep, dependant, err)
	}
	token := rand.Text()
	edgeCond := expression.AttributeExists(expression.Name(AttrPK)).And(expression.AttributeNotExists(expression.Name(attrResolved)))
	edge, err := s.txUpdate(update{key: edgeKey(dep, dependant), upd: expression.Set(expression.Name(attrResolved), expression.Value(token)), cond: &edgeCond})
	if err != nil {
		return fail(err)
	}
	upd := expression.Add(expression.Name(attrDepsPend), expression.Value(-1))
	if failure != "" {
		upd = upd.Set(expression.Name(attrDepFailure), expression.IfNotExists(expression.Name(attrDepFailure), expression.Value(failure)))
	}
	exists := expression.AttributeExists(expression.Name(AttrPK))
	jobUpd, err := s.txUpdate(update{key: jobKey(dependant), upd: upd, cond: &exists})
	if err != nil {
		return fail(err)
	}
	reasons, err := s.transact(ctx, []types.TransactWriteItem{edge, jobUpd})
	if err != nil {
		return fail(err)
	}
	applied := true
	switch {
	case reasons == nil:
	case failedAt(reasons, 0):
		old := reasons[0].Item
		if old == nil {
			// The service returned no item: read it.
			if old, err = s.getItem(ctx, edgeKey(dep, dependant)); err != nil {
				return fail(err)
			}
		}
		switch {
		case len(old) == 0:
			return fail(fmt.Errorf("no such edge: %w", job.ErrNotFound))
		case getS(old, attrResolved) != token:
			applied = false
		}
		// else: applied by a try whose answer was lost.
	case failedAt(reasons, 1):
		return fail(fmt.Errorf("dependant: %w", job.ErrNotFound))
	default:
		return fail(fmt.Errorf("transaction cancelled: %v", reasonCodes(reasons)))
	}
	j, err := s.GetJob(ctx, dependant)
	if err != nil {
		return fail(err)
	}
	return store.Resolution{Applied: applied, Job: j}, nil
}

// Dependants implements store.Flow with a consistent Query of the
// dependency's partition.
func (s *Store) Dependants(ctx context.Context, id string) ([]store.Edge, error) {
	kc := expression.Key(AttrPK).Equal(expression.Value(jobPK(id))).And(expression.Key(AttrSK).BeginsWith(edgePrefix))
	ex, err := expression.NewBuilder().WithKeyCondition(kc).Build()
	if err != nil {
		return nil, fmt.Errorf("dynamostore: dependants of %s: %w", id, err)
	}
	in := &dynamodb.QueryInput{
		TableName: aws.String(s.table), ConsistentRead: aws.Bool(true),
		KeyConditionExpression: ex.KeyCondition(), ExpressionAttributeNames: ex.Names(), ExpressionAttributeValues: ex.Values(),
	}
	out := []store.Edge{}
	for {
		res, err := s.db.Query(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("dynamostore: dependants of %s: %w", id, err)
		}
		for _, item := range res.Items {
			d, ok := strings.CutPrefix(getS(item, AttrSK), edgePrefix)
			if !ok {
				continue
			}
			_, resolved := item[attrResolved]
			out = append(out, store.Edge{Dependant: d, Resolved: resolved})
		}
		if len(res.LastEvaluatedKey) == 0 {
			return out, nil
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
}

// FollowUps implements store.Flow: it queries the FollowUps index up to
// before and reads the jobs it names consistently, keeping those that
// still carry a token.
func (s *Store) FollowUps(ctx context.Context, before time.Time, limit int) ([]*job.Job, error) {
	fail := func(err error) ([]*job.Job, error) { return nil, fmt.Errorf("dynamostore: follow-ups: %w", err) }
	n, err := job.PageSize(limit)
	if err != nil {
		return fail(err)
	}
	ms := before.UnixMilli()
	if ms < 0 {
		return nil, nil
	}
	in, err := s.queryBefore(IndexFollowUps, AttrFollowPK, followPK, AttrFollowSK, ms, n)
	if err != nil {
		return fail(err)
	}
	var out []*job.Job
	for len(out) < n {
		res, err := s.db.Query(ctx, in)
		if err != nil {
			return fail(err)
		}
		var ids []string
		for _, item := range res.Items {
			if id, ok := idOfListKey(getS(item, AttrFollowSK)); ok {
				ids = append(ids, id)
			}
		}
		jobs, err := s.loadJobs(ctx, ids)
		if err != nil {
			return fail(err)
		}
		for _, id := range ids {
			if j := jobs[id]; j != nil && j.FollowUp != "" && len(out) < n && !slices.ContainsFunc(out, func(o *job.Job) bool { return o.ID == id }) {
				out = append(out, j)
			}
		}
		if len(res.LastEvaluatedKey) == 0 {
			break
		}
		in.ExclusiveStartKey = res.LastEvaluatedKey
	}
	return out, nil
}

// ClearFollowUp implements store.Flow in one conditional UpdateItem. A
// retried request whose first try was applied reports job.ErrConflict
// (the token is gone): callers treat a conflict as "nothing to clear".
func (s *Store) ClearFollowUp(ctx context.Context, id, token string) error {
	cond := expression.AttributeExists(expression.Name(AttrPK)).And(expression.Name(attrFollowUp).Equal(expression.Value(token)))
	upd := expression.Remove(expression.Name(attrFollowUp)).Remove(expression.Name(AttrFollowPK)).Remove(expression.Name(AttrFollowSK))
	_, err := s.updateItem(ctx, update{key: jobKey(id), upd: upd, cond: &cond})
	if old, ok := condFailed(err); ok {
		if len(old) == 0 {
			if old, err = s.getItem(ctx, jobKey(id)); err != nil {
				return fmt.Errorf("dynamostore: clear follow-up of %s: %w", id, err)
			}
		}
		if len(old) == 0 {
			return fmt.Errorf("dynamostore: clear follow-up of %s: %w", id, job.ErrNotFound)
		}
		return fmt.Errorf("dynamostore: clear follow-up of %s: token %q is not the job's: %w", id, token, job.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("dynamostore: clear follow-up of %s: %w", id, err)
	}
	return nil
}
