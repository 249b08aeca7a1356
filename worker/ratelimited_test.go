package worker_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type throttledArgs struct {
	N int `json:"n"`
}

func (throttledArgs) Kind() string { return "throttled" }

// TestJobRateLimitedBacksThePartitionOff: a handler that returns
// JobRateLimited (a provider's 429, Retry-After 1s) has its job run again
// after it at the same attempt, and no job of its limit's partition starts
// until then, by the database's clock, though the limit has room: the
// fleet stops calling the provider. The job's error is recorded as a
// put-back's.
func TestJobRateLimitedBacksThePartitionOff(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	if err := client.SetLimit(ctx, pgqueue.Limit{Name: "provider", Queue: "throttled", Concurrency: 1}); err != nil {
		t.Fatal(err)
	}
	var refused atomic.Bool
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[throttledArgs]) error {
		if job.Args.N == 0 && refused.CompareAndSwap(false, true) {
			return worker.JobRateLimited(time.Second, errors.New("429 Too Many Requests"))
		}
		return nil
	})
	var ids []int64
	for i := range 3 {
		p, err := queue.Params(throttledArgs{N: i}, &queue.InsertOpts{Queue: "throttled"})
		if err != nil {
			t.Fatal(err)
		}
		res, err := client.Enqueue(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	w := startWorker(t, client, reg, worker.Config{Queues: map[string]int{"throttled": 3}, PromoteInterval: 50 * time.Millisecond})
	testwatch.WaitFor(t, time.Minute, "every job to complete", func() bool {
		var done int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = 'throttled' AND state = 'completed'`).Scan(&done); err != nil {
			t.Fatal(err)
		}
		return done == len(ids)
	})
	var until, firstOther time.Time
	if err := db.Pool.QueryRow(ctx, `
SELECT (SELECT max(backoff_until) FROM jobfence_limit_slots WHERE name = 'provider'),
       (SELECT min(attempted_at) FROM jobfence_jobs WHERE id = ANY ($1))`, ids[1:]).Scan(&until, &firstOther); err != nil {
		t.Fatal(err)
	}
	if firstOther.Before(until) {
		t.Fatalf("a job of the partition started at %s, before its backoff ended at %s", firstOther, until)
	}
	j, err := client.Get(ctx, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	if j.Attempt != 1 || len(j.Errors) != 1 || !j.Errors[0].PutBack ||
		j.Errors[0].Error != "jobfence: rate limited by the provider; retry after 1s: 429 Too Many Requests" {
		t.Fatalf("the rate-limited job ran at attempt %d with errors %+v, want attempt 1 and the 429 as a put-back", j.Attempt, j.Errors)
	}
	if s := w.Stats(); s.Snoozed != 1 || s.Retried != 0 {
		t.Fatalf("stats %+v: want one snooze and no retry", s)
	}
}

// TestJobRateLimitedRefusesANegativeWait: a negative Retry-After is a
// handler's bug, reported as a plain error that fails the attempt.
func TestJobRateLimitedRefusesANegativeWait(t *testing.T) {
	err := worker.JobRateLimited(-time.Second, errors.New("429"))
	if want := "jobfence: JobRateLimited: retry-after is negative: -1s (the provider's error: 429)"; err == nil || err.Error() != want {
		t.Fatalf("JobRateLimited(-1s) = %v, want %q", err, want)
	}
	if !errors.Is(err, worker.ErrNegativeRetryAfter) {
		t.Fatalf("JobRateLimited(-1s) = %v, want ErrNegativeRetryAfter", err)
	}
	if err := worker.JobRateLimited(-time.Second, nil); err.Error() != "jobfence: JobRateLimited: retry-after is negative: -1s" {
		t.Fatalf("JobRateLimited(-1s, nil) = %v", err)
	}
	cause := errors.New("429")
	if err := worker.JobRateLimited(time.Second, cause); !errors.Is(err, cause) {
		t.Fatalf("JobRateLimited(1s, cause) = %v, does not wrap the cause", err)
	}
}

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)
	for _, tt := range []struct {
		value string
		want  time.Duration
	}{
		{"", 0},
		{"3", 3 * time.Second},
		{" 120 ", 2 * time.Minute},
		{"0", 0},
		{"-5", 0},
		{"1.5", 0},
		{"soon", 0},
		{now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{now.Add(-time.Minute).Format(http.TimeFormat), 0},
		{"Wed, 02 Dec 2026 06:00:30 GMT", 30 * time.Second},
		{"Wednesday, 02-Dec-26 06:00:30 GMT", 30 * time.Second},
		{"99999999999999999999", 0},
		{fmt.Sprint(int64(1) << 40), 365 * 24 * time.Hour},
	} {
		h := http.Header{}
		if tt.value != "" {
			h.Set("Retry-After", tt.value)
		}
		if got := worker.RetryAfter(h, now); got != tt.want {
			t.Errorf("RetryAfter(%q) = %s, want %s", tt.value, got, tt.want)
		}
	}
}
