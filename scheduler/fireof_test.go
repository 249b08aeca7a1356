package scheduler_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
	"github.com/jobfence/jobfence/worker"
)

// flakyRun is what a handler of a fire's job saw at one attempt.
type flakyRun struct {
	attempt     int
	scheduledAt time.Time
	fire        scheduler.Fire
	ok          bool
}

// TestFireOfStableAcrossRetries: the handler of a fire's job fails at its
// first attempt and the worker retries it; both attempts learn the same
// fire time from FireOf, the fire that OnFire reported, although the retry
// moved the job's ScheduledAt. Before FireOf, a handler had only
// ScheduledAt, which the retry moves.
func TestFireOfStableAcrossRetries(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet})
	rec := newRecorder()
	s := scheduler.New(client, scheduler.Config{Logger: quiet, OnFire: rec.onFire(0)})
	if err := s.AddArgs("nightly", "* * * * * *", ReportArgs{Format: "pdf"}, scheduler.Options{Queue: "reports"}); err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	runs := map[int64][]flakyRun{}
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[ReportArgs]) error {
		f, ok := scheduler.FireOf(job.Job)
		mu.Lock()
		runs[job.ID] = append(runs[job.ID], flakyRun{attempt: job.Attempt, scheduledAt: job.ScheduledAt, fire: f, ok: ok})
		mu.Unlock()
		if job.Attempt == 1 {
			return errors.New("the first attempt fails")
		}
		return nil
	})
	w, err := worker.New(client, reg, worker.Config{
		Logger: quiet, Queues: map[string]int{"reports": 2}, PollInterval: 50 * time.Millisecond,
		PromoteInterval: 50 * time.Millisecond, RetryPolicy: worker.ExponentialRetry{Max: 1500 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	start(t, s)
	testwatch.WaitFor(t, time.Minute, "a fire", func() bool { return len(rec.inserted(0)) > 0 })
	stop(t, s)
	fire := rec.inserted(0)[0]
	testwatch.WaitFor(t, time.Minute, "the fire's job to run twice", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs[fire.JobID]) >= 2
	})

	mu.Lock()
	got := runs[fire.JobID]
	mu.Unlock()
	if got[0].attempt != 1 || got[1].attempt != 2 {
		t.Fatalf("attempts %d and %d, want 1 and 2", got[0].attempt, got[1].attempt)
	}
	if !got[1].scheduledAt.After(fire.At) {
		t.Fatalf("the retry's ScheduledAt %v is not after the fire %v: the test shows nothing", got[1].scheduledAt, fire.At)
	}
	for _, r := range got[:2] {
		if !r.ok || r.fire.Schedule != "nightly" || !r.fire.At.Equal(fire.At) || r.fire.JobID != fire.JobID || r.fire.Triggered {
			t.Errorf("attempt %d: FireOf = %+v, %v; want the fire of %v of nightly, job %d", r.attempt, r.fire, r.ok, fire.At, fire.JobID)
		}
	}
}

func TestFireOf(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 3, 29, 1, 30, 0, 0, time.UTC)
	for _, tt := range []struct {
		job  queue.Job
		want scheduler.Fire
		ok   bool
	}{
		{queue.Job{ID: 7, UniqueKey: scheduler.UniqueKey("nightly", at)}, scheduler.Fire{Schedule: "nightly", At: at, JobID: 7}, true},
		{queue.Job{ID: 8, UniqueKey: scheduler.UniqueKey("a:b", at)}, scheduler.Fire{Schedule: "a:b", At: at, JobID: 8}, true},
		{queue.Job{ID: 8, UniqueKey: scheduler.TriggerKey("a-run", at)}, scheduler.Fire{Schedule: "a-run", At: at, JobID: 8, Triggered: true}, true},
		{queue.Job{ID: 9, UniqueKey: "cron:x:-run"}, scheduler.Fire{}, false},
		{queue.Job{ID: 9, UniqueKey: "order-17"}, scheduler.Fire{}, false},
		{queue.Job{ID: 9, UniqueKey: "cron:x"}, scheduler.Fire{}, false},
		{queue.Job{ID: 9, UniqueKey: "cron::17"}, scheduler.Fire{}, false},
		{queue.Job{ID: 9, UniqueKey: "cron:x:soon"}, scheduler.Fire{}, false},
		{queue.Job{ID: 9}, scheduler.Fire{}, false},
	} {
		got, ok := scheduler.FireOf(&tt.job)
		if ok != tt.ok || got != tt.want {
			t.Errorf("FireOf(key %q) = %+v, %v; want %+v, %v", tt.job.UniqueKey, got, ok, tt.want, tt.ok)
		}
	}
	if _, ok := scheduler.FireOf(nil); ok {
		t.Error("FireOf(nil) is a fire")
	}
}
