package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"time"

	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds/eventfanout"
	"github.com/slicework/slicework/shared/kinds/recompute"
)

// jobDetails is GET /jobs/{id}: the job and its dependency edges.
type jobDetails struct {
	job.Job
	Dependants []string `json:"dependants"`
}

// dependencyChain submits A, then B depending on A, then C depending on B,
// all through the API, and checks that each ran only after the one before
// it finished and that the edges show in the job details. It returns the
// three job ids.
func dependencyChain(ctx context.Context, api *apiClient, timeout time.Duration) ([]string, error) {
	submit := func(name string, deps ...string) (*job.Job, error) {
		return api.submit(ctx, map[string]any{
			"kind": recompute.Kind, "input": job.Input{Type: job.InputIDRange, Start: 0, End: 2_000},
			"chunk_size": 1_000, "tags": []string{"e2e", "e2e-chain-" + name}, "depends_on": deps,
		})
	}
	a, err := submit("a")
	if err != nil {
		return nil, err
	}
	b, err := submit("b", a.ID)
	if err != nil {
		return nil, err
	}
	c, err := submit("c", b.ID)
	if err != nil {
		return nil, err
	}
	step("submitted A %s, B %s (depends on A), C %s (depends on B); B is %s, C is %s", a.ID, b.ID, c.ID, b.State, c.State)
	if b.State.Terminal() || c.State == job.StateRunning || c.State == job.StateQueued {
		return nil, fmt.Errorf("dependants started early: B %s, C %s", b.State, c.State)
	}
	var prev *job.Job
	for _, j := range []*job.Job{a, b, c} {
		done, err := api.wait(ctx, j.ID, timeout)
		if err != nil {
			return nil, err
		}
		if done.State != job.StateSucceeded || done.Counters.ChunksDone != 2 || done.Counters.ItemsDone != 2_000 {
			return nil, fmt.Errorf("job %s ended %s with %+v: want succeeded, 2 chunks and 2,000 items done", j.ID, done.State, done.Counters)
		}
		if prev != nil && (done.StartedAt == nil || prev.FinishedAt == nil || done.StartedAt.Before(*prev.FinishedAt)) {
			return nil, fmt.Errorf("job %s started at %v, before its dependency %s finished at %v", j.ID, done.StartedAt, prev.ID, prev.FinishedAt)
		}
		prev = done
	}
	var da, dc jobDetails
	if err := api.call(ctx, "GET", "/jobs/"+a.ID, nil, &da); err != nil {
		return nil, err
	}
	if err := api.call(ctx, "GET", "/jobs/"+c.ID, nil, &dc); err != nil {
		return nil, err
	}
	if len(da.Dependants) != 1 || da.Dependants[0] != b.ID || len(dc.DependsOn) != 1 || dc.DependsOn[0] != b.ID {
		return nil, fmt.Errorf("edges: A's dependants %v (want [%s]), C's depends_on %v (want [%s])", da.Dependants, b.ID, dc.DependsOn, b.ID)
	}
	step("A, B and C succeeded in order; edges A→B and B→C show in the details")
	return []string{a.ID, b.ID, c.ID}, nil
}

// replaceFanout fires an event with subscribers through the API: the
// firedevent job REPLACEs itself with one processsubscription job per
// subscriber, each of which REPLACEs itself with its notification jobs.
// It checks the exact number of jobs of every kind and the lineage.
func replaceFanout(ctx context.Context, api *apiClient, timeout time.Duration) error {
	const subscribers = 6
	event := fmt.Sprintf("e2e-%d", time.Now().UnixNano())
	args, _ := json.Marshal(eventfanout.FiredEvent{Event: event, Subscribers: subscribers})
	fired, err := api.submit(ctx, map[string]any{"kind": eventfanout.FiredEventKind, "args": json.RawMessage(args),
		"input": eventfanout.Input, "tags": []string{eventfanout.Tag(event)}})
	if err != nil {
		return err
	}
	step("submitted firedevent %s (event %s, %d subscribers)", fired.ID, event, subscribers)
	if _, err := api.wait(ctx, fired.ID, timeout); err != nil {
		return err
	}
	want := map[string]int{eventfanout.FiredEventKind: 1, eventfanout.ProcessSubscriptionKind: subscribers,
		eventfanout.ProcessNotificationKind: eventfanout.Notifications(subscribers)}
	total := 0
	for _, n := range want {
		total += n
	}
	deadline := time.Now().Add(timeout)
	for {
		jobs, err := api.list(ctx, "tag="+url.QueryEscape(eventfanout.Tag(event)))
		if err != nil {
			return err
		}
		got, done := map[string]int{}, 0
		for _, j := range jobs {
			got[j.Kind]++
			if j.State == job.StateSucceeded {
				done++
			} else if j.State.Terminal() {
				return fmt.Errorf("job %s (%s) ended %s: %s", j.ID, j.Kind, j.State, j.Error)
			}
		}
		if len(jobs) == total && done == total && fmt.Sprint(got) == fmt.Sprint(want) {
			break
		}
		if len(jobs) > total {
			return fmt.Errorf("event %s: %d jobs %v, more than the %d expected %v", event, len(jobs), got, total, want)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("event %s: %d of %d jobs succeeded after %s (%v, want %v)", event, done, total, timeout, got, want)
		}
		time.Sleep(time.Second)
	}
	children, err := api.list(ctx, "parent="+url.QueryEscape(fired.ID))
	if err != nil {
		return err
	}
	if len(children) != subscribers {
		return fmt.Errorf("firedevent %s has %d children, want %d", fired.ID, len(children), subscribers)
	}
	for _, ch := range children {
		if ch.Kind != eventfanout.ProcessSubscriptionKind || ch.Parent != fired.ID {
			return fmt.Errorf("child %s: kind %s parent %s", ch.ID, ch.Kind, ch.Parent)
		}
	}
	step("all %d jobs succeeded: %v; firedevent's children are its %d processsubscription jobs", total, want, subscribers)
	return nil
}

// list returns every job that GET /jobs?<query> finds, following cursors.
func (c *apiClient) list(ctx context.Context, query string) ([]*job.Job, error) {
	var all []*job.Job
	cursor := ""
	for {
		q := query + "&limit=100"
		if cursor != "" {
			q += "&cursor=" + url.QueryEscape(cursor)
		}
		var page struct {
			Jobs []*job.Job `json:"jobs"`
			Next string     `json:"next"`
		}
		if err := c.call(ctx, "GET", "/jobs?"+q, nil, &page); err != nil {
			return nil, err
		}
		all = append(all, page.Jobs...)
		if page.Next == "" {
			return all, nil
		}
		cursor = page.Next
	}
}
