package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type progressArgs struct {
	Mode string `json:"mode"`
}

func (progressArgs) Kind() string { return "progress" }

type silentArgs struct{}

func (silentArgs) Kind() string { return "silent" }

// countingProgress is the real backend, counting its progress writes and
// passing on each value once it is stored (wrote, when set).
type countingProgress struct {
	*pgqueue.Client
	writes atomic.Int32
	wrote  chan string
}

func (c *countingProgress) RecordProgress(ctx context.Context, l queue.Lease, b []byte) error {
	err := c.Client.RecordProgress(ctx, l, b)
	c.writes.Add(1)
	if c.wrote != nil {
		c.wrote <- string(b)
	}
	return err
}

// progressOf decodes a job's stored progress, nil if none.
func progressOf(t *testing.T, c *pgqueue.Client, id int64) map[string]any {
	t.Helper()
	j := stateOf(t, c, id)
	if j.Progress == nil {
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(j.Progress, &m); err != nil {
		t.Fatalf("job %d's progress %q: %v", id, j.Progress, err)
	}
	return m
}

// wait receives from ch within 30 s, or fails t naming what it waited for.
func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(30 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// TestProgressVisibleWhileRunning: a handler's progress is read by Get
// while the job runs; the value it reported last, held back by the
// throttle, is stored before the outcome and stays once the job completed
// and its row moved to the finished jobs' table; a job that never reports
// progress costs no write and has none; outside a handler Progress says so.
func TestProgressVisibleWhileRunning(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	if _, err := c.MaintainFinished(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	b := &countingProgress{Client: c}
	reported, proceed := make(chan error, 1), make(chan struct{})
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[progressArgs]) error {
		reported <- worker.Progress(ctx, map[string]int{"done": 1, "of": 3})
		<-proceed
		// Within the interval: held back, then written before the outcome.
		return worker.Progress(ctx, map[string]int{"done": 3, "of": 3})
	})
	worker.Add(reg, func(ctx context.Context, job *worker.Job[silentArgs]) error { return nil })
	startWorker(t, b, reg, worker.Config{ProgressInterval: time.Hour, PollInterval: 50 * time.Millisecond})

	silent, err := c.Insert(ctx, silentArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "the silent job's completion", func() bool { return stateOf(t, c, silent.ID).State == queue.StateCompleted })
	if n := b.writes.Load(); n != 0 || stateOf(t, c, silent.ID).Progress != nil {
		t.Fatalf("a job that reported no progress: %d progress writes, progress %s; want none", n, stateOf(t, c, silent.ID).Progress)
	}

	res, err := c.Insert(ctx, progressArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := wait(t, reported, "the handler's first progress"); err != nil {
		t.Fatalf("Progress: %v", err)
	}
	if j := stateOf(t, c, res.ID); j.State != queue.StateRunning {
		t.Fatalf("job is %s, want running", j.State)
	}
	if got, want := progressOf(t, c, res.ID), map[string]any{"done": 1.0, "of": 3.0}; !reflect.DeepEqual(got, want) {
		t.Fatalf("progress while running = %v, want %v", got, want)
	}
	close(proceed)
	testwatch.WaitFor(t, 30*time.Second, "the job's completion", func() bool { return stateOf(t, c, res.ID).State == queue.StateCompleted })
	if got, want := progressOf(t, c, res.ID), map[string]any{"done": 3.0, "of": 3.0}; !reflect.DeepEqual(got, want) {
		t.Fatalf("progress after completion = %v, want %v", got, want)
	}
	var moved []byte
	if err := db.Pool.QueryRow(ctx, `SELECT progress FROM jobfence_jobs_finished WHERE id = $1`, res.ID).Scan(&moved); err != nil {
		t.Fatalf("the completed job's row in jobfence_jobs_finished: %v", err)
	}
	if !strings.Contains(string(moved), `"done": 3`) {
		t.Fatalf("the moved row's progress is %s", moved)
	}
	if n := b.writes.Load(); n != 2 {
		t.Fatalf("%d progress writes, want 2 (the first call's and the one before the outcome)", n)
	}
	if err := worker.Progress(ctx, 1); !errors.Is(err, worker.ErrNotInHandler) {
		t.Fatalf("Progress outside a handler = %v, want ErrNotInHandler", err)
	}
}

// TestProgressThrottled: a burst of calls within the interval writes once
// at once and once before the outcome, and the value stored is the last.
// With a short interval, the timer writes the values held back while the
// job still runs, in order, at most one write per interval, the last
// value included, and nothing is left to write at the outcome.
func TestProgressThrottled(t *testing.T) {
	for _, tt := range []struct {
		name     string
		interval time.Duration
	}{{"burst", time.Hour}, {"timer", 20 * time.Millisecond}} {
		t.Run(tt.name, func(t *testing.T) {
			db := pgtest.New(t)
			ctx := context.Background()
			c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
			const burst = 100
			b := &countingProgress{Client: c, wrote: make(chan string, 2*burst)}
			reported, proceed := make(chan error, 1), make(chan struct{})
			var took time.Duration
			reg := worker.NewRegistry()
			worker.Add(reg, func(ctx context.Context, job *worker.Job[progressArgs]) error {
				var err error
				start := time.Now()
				for i := range burst {
					err = errors.Join(err, worker.Progress(ctx, map[string]int{"n": i}))
				}
				took = time.Since(start)
				reported <- err
				<-proceed
				return nil
			})
			startWorker(t, b, reg, worker.Config{ProgressInterval: tt.interval, PollInterval: 50 * time.Millisecond})
			res, err := c.Insert(ctx, progressArgs{}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := wait(t, reported, "the burst"); err != nil {
				t.Fatalf("Progress: %v", err)
			}
			if got := wait(t, b.wrote, "the first write"); got != `{"n":0}` {
				t.Fatalf("first write %s, want the first call's", got)
			}
			last := fmt.Sprintf(`{"n":%d}`, burst-1)
			writes := 1
			if tt.interval < time.Hour {
				// The timer writes what the calls left, in order, up to
				// the last value, while the job runs: a write begins at
				// most once per interval, so no more than one write for
				// each interval the burst took, one at its start, and the
				// one after it.
				for prev := 0; ; writes++ {
					got := wait(t, b.wrote, "the timer's writes")
					var v struct{ N int }
					if err := json.Unmarshal([]byte(got), &v); err != nil || v.N <= prev {
						t.Fatalf("write %d is %s after n %d: want a later value", writes+1, got, prev)
					}
					prev = v.N
					if got == last {
						writes++
						break
					}
				}
				if most := 2 + int(took/tt.interval); writes > most {
					t.Fatalf("%d writes for a burst of %v, want at most %d at one per %v", writes, took, most, tt.interval)
				}
				if got := progressOf(t, c, res.ID); got["n"] != float64(burst-1) || stateOf(t, c, res.ID).State != queue.StateRunning {
					t.Fatalf("while running after the timer: progress %v", got)
				}
			} else if got := progressOf(t, c, res.ID); got["n"] != 0.0 {
				t.Fatalf("while running: progress %v, want the first call's", got)
			} else {
				writes++ // the one before the outcome
			}
			close(proceed)
			testwatch.WaitFor(t, 30*time.Second, "the job's completion", func() bool { return stateOf(t, c, res.ID).State == queue.StateCompleted })
			if got := progressOf(t, c, res.ID); got["n"] != float64(burst-1) {
				t.Fatalf("after completion: progress %v, want the last call's", got)
			}
			if n := b.writes.Load(); int(n) != writes {
				t.Fatalf("%d calls made %d writes, want %d", burst, n, writes)
			}
		})
	}
}

// TestProgressTooLarge: a value past Config.MaxProgressBytes is refused
// with an error that says by how much and what to do, and nothing is
// stored.
func TestProgressTooLarge(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	b := &countingProgress{Client: c}
	reported := make(chan error, 1)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[progressArgs]) error {
		reported <- worker.Progress(ctx, strings.Repeat("x", 100))
		return nil
	})
	startWorker(t, b, reg, worker.Config{MaxProgressBytes: 64, PollInterval: 50 * time.Millisecond})
	res, err := c.Insert(ctx, progressArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = wait(t, reported, "the handler's progress")
	want := fmt.Sprintf("jobfence: job progress too large: job %d's progress is 102 bytes of JSON, more than the 64 of Config.MaxProgressBytes; "+
		"report a count or a step's name, and record results with RecordOutput", res.ID)
	if !errors.Is(err, worker.ErrProgressTooLarge) || err.Error() != want {
		t.Fatalf("Progress = %v, want %q", err, want)
	}
	testwatch.WaitFor(t, 30*time.Second, "the job's completion", func() bool { return stateOf(t, c, res.ID).State == queue.StateCompleted })
	if p := stateOf(t, c, res.ID).Progress; p != nil || b.writes.Load() != 0 {
		t.Fatalf("progress %s stored after %d writes; want none", p, b.writes.Load())
	}
}

// TestProgressOfStaleAttemptChangesNothing: an attempt whose lease ran out
// (its heartbeats frozen), the job rescued, claimed again under a new
// fence and completed by the next attempt, cannot overwrite that
// attempt's progress: its Progress returns an error wrapping
// ErrStaleFence and the next attempt's value stays. (pgqueue's
// TestRecordProgressIsFenced refuses the write while the new attempt
// runs.)
func TestProgressOfStaleAttemptChangesNothing(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	res, err := c.Insert(ctx, progressArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	firstWrote, secondWrote, staleErr := make(chan error, 1), make(chan error, 1), make(chan error, 1)
	release := make(chan struct{})
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[progressArgs]) error {
		if job.Attempt == 1 {
			firstWrote <- worker.Progress(ctx, map[string]int{"attempt": 1})
			<-release // deaf to its context, as a paused process is
			staleErr <- worker.Progress(ctx, map[string]string{"attempt": "stale"})
			return nil
		}
		secondWrote <- worker.Progress(ctx, map[string]int{"attempt": job.Attempt})
		return nil
	}, worker.HandlerOptions{Timeout: -1})
	hb := &blockingHeartbeats{Client: c, release: make(chan struct{})}
	defer close(hb.release)
	startWorker(t, hb, reg, worker.Config{Lease: 2 * time.Second, RescueInterval: 100 * time.Millisecond,
		ProgressInterval: time.Millisecond, PollInterval: 50 * time.Millisecond, Queues: map[string]int{"default": 4}})
	if err := wait(t, firstWrote, "the first attempt's progress"); err != nil {
		t.Fatalf("first attempt's Progress: %v", err)
	}
	if err := wait(t, secondWrote, "the second attempt's progress"); err != nil {
		t.Fatalf("second attempt's Progress: %v", err)
	}
	testwatch.WaitFor(t, 30*time.Second, "the second attempt's completion", func() bool { return stateOf(t, c, res.ID).State == queue.StateCompleted })
	close(release)
	err = wait(t, staleErr, "the stale attempt's progress")
	if !errors.Is(err, queue.ErrStaleFence) || !strings.Contains(err.Error(), fmt.Sprintf("jobfence: progress of job %d: jobfence: job %d: fence", res.ID, res.ID)) {
		t.Fatalf("the stale attempt's Progress = %v, want a stale fence", err)
	}
	if got := progressOf(t, c, res.ID); got["attempt"] != 2.0 {
		t.Fatalf("progress %v, want the second attempt's", got)
	}
}
