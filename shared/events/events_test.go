package events_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/events"
	"github.com/slicework/slicework/shared/job"
)

func TestFinished(t *testing.T) {
	t.Parallel()
	fin := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, tc := range []struct {
		name      string
		err       string
		wantError string
	}{
		{"Short", "boom", "boom"},
		{"Long", strings.Repeat("x", events.MaxErrorBytes+10), strings.Repeat("x", events.MaxErrorBytes) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			j := &job.Job{ID: "J1", Kind: "k", State: job.StateFailed, Error: tc.err, DependsOn: []string{"J0"}, FinishedAt: &fin}
			e := events.Finished(j)
			if e.ID != "J1:failed" || e.JobID != "J1" || e.State != job.StateFailed || e.Error != tc.wantError ||
				len(e.DependsOn) != 1 || e.FinishedAt == nil || !e.FinishedAt.Equal(fin) {
				t.Errorf("Finished = %+v", e)
			}
			if e.ID != events.EventID("J1", job.StateFailed) {
				t.Errorf("ID %q differs from EventID", e.ID)
			}
		})
	}
}

func TestBus(t *testing.T) {
	t.Parallel()
	var b events.Bus
	ctx := context.Background()
	var mu sync.Mutex
	var got []string
	record := func(name string) func(events.JobFinished) {
		return func(e events.JobFinished) { mu.Lock(); got = append(got, name+":"+e.JobID); mu.Unlock() }
	}
	cancelA := b.Subscribe(record("a"))
	b.Subscribe(record("b"))
	if err := b.Publish(ctx, events.JobFinished{JobID: "1"}); err != nil {
		t.Fatal(err)
	}
	cancelA()
	cancelA() // idempotent
	if err := b.Publish(ctx, events.JobFinished{JobID: "2"}); err != nil {
		t.Fatal(err)
	}
	want := []string{"a:1", "b:1", "b:2"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("delivered %v, want %v", got, want)
	}
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := b.Publish(done, events.JobFinished{JobID: "3"}); err == nil {
		t.Error("Publish with a done context succeeded")
	}
	if len(got) != 3 {
		t.Errorf("a done context still delivered: %v", got)
	}
}
