package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type heldArgs struct {
	N int `json:"n"`
}

func (heldArgs) Kind() string { return "held" }

// claimCounts are what a worker's hooks reported claimed.
type claimCounts struct {
	// byOutcomes sums FinishInfo.Claimed; hooked sums ClaimInfo.Jobs, and
	// hookedFinish those of the calls with ClaimInfo.Finish.
	byOutcomes, hooked, hookedFinish atomic.Int64
}

// limitedWorker sets a limit of limit at once on queue q, inserts n jobs
// whose handler runs run, and starts a worker of concurrency conc on it,
// its grant pass an hour away: every slot goes round through outcomes.
// It returns the worker and the most handlers it saw running at once.
func limitedWorker(t *testing.T, client *pgqueue.Client, q string, limit, conc, n int, counts *claimCounts, run func()) (*worker.Worker, *atomic.Int64) {
	t.Helper()
	ctx := context.Background()
	if err := client.SetLimit(ctx, pgqueue.Limit{Name: q, Queue: q, Concurrency: limit}); err != nil {
		t.Fatal(err)
	}
	var now, most atomic.Int64
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[heldArgs]) error {
		at := now.Add(1)
		for m := most.Load(); at > m && !most.CompareAndSwap(m, at); m = most.Load() {
		}
		run()
		now.Add(-1)
		return nil
	})
	ps := make([]queue.EnqueueParams, n)
	for i := range ps {
		p, err := queue.Params(heldArgs{N: i}, &queue.InsertOpts{Queue: q})
		if err != nil {
			t.Fatal(err)
		}
		ps[i] = p
	}
	if _, err := client.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	cfg := worker.Config{Queues: map[string]int{q: conc}, PromoteInterval: time.Hour}
	cfg.Hooks.Finish = func(_ context.Context, f worker.FinishInfo) { counts.byOutcomes.Add(int64(f.Claimed)) }
	cfg.Hooks.Claim = func(_ context.Context, c worker.ClaimInfo) {
		counts.hooked.Add(int64(c.Jobs))
		if c.Finish {
			counts.hookedFinish.Add(int64(c.Jobs))
		}
	}
	return startWorker(t, client, reg, cfg), &most
}

// TestWorkerRunsWhatItsOutcomesClaim: under a limit, a worker's outcomes
// claim the jobs their freed slots go to and its runners run them at
// once: every job runs once, at its first attempt, by this worker; no
// more than the limit run at once; and the outcomes' round trips claimed
// jobs (FinishInfo.Claimed), counted in Stats.Claimed and reported to
// the Claim hook (ClaimInfo.Finish) with the fetch loops' claims.
func TestWorkerRunsWhatItsOutcomesClaim(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	const limit, n = 3, 60
	var counts claimCounts
	w, most := limitedWorker(t, client, "held", limit, 8, n, &counts, func() { time.Sleep(time.Millisecond) })
	testwatch.WaitFor(t, 2*time.Minute, "every limited job to complete", func() bool {
		var done int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = 'held' AND state = 'completed'`).Scan(&done); err != nil {
			t.Fatal(err)
		}
		return done == n
	})
	if m := most.Load(); m > limit {
		t.Fatalf("%d handlers ran at once, the limit is %d", m, limit)
	}
	var bad int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = 'held' AND (attempt <> 1 OR attempted_by <> ARRAY[$1])`, w.ID()).Scan(&bad); err != nil {
		t.Fatal(err)
	}
	if bad > 0 {
		t.Fatalf("%d jobs ran other than once, at their first attempt, by worker %s", bad, w.ID())
	}
	s := w.Stats()
	if counts.byOutcomes.Load() == 0 || s.Claimed != n {
		t.Fatalf("outcomes claimed %d jobs, stats %+v: want some of the %d claimed by outcomes, all counted as claimed", counts.byOutcomes.Load(), s, n)
	}
	if counts.hooked.Load() != n || counts.hookedFinish.Load() != counts.byOutcomes.Load() {
		t.Fatalf("the Claim hook reported %d jobs claimed, %d of them by outcomes; want all %d, and the %d that FinishInfo.Claimed counted",
			counts.hooked.Load(), counts.hookedFinish.Load(), n, counts.byOutcomes.Load())
	}
}

// TestStopRunsWhatItsOutcomesClaimed: a worker stopped while its
// outcomes claim jobs runs the jobs they claimed before it returns: none
// is left running, no runner's channel is closed under a claim in flight,
// and no more than the limit ran at once.
func TestStopRunsWhatItsOutcomesClaimed(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	const limit, n = 2, 400
	var counts claimCounts
	w, most := limitedWorker(t, client, "stop", limit, 4, n, &counts, func() { time.Sleep(2 * time.Millisecond) })
	testwatch.WaitFor(t, 2*time.Minute, "outcomes to claim jobs", func() bool { return counts.byOutcomes.Load() > 0 })
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := w.Stop(sctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	var running, done int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'running'), count(*) FILTER (WHERE state = 'completed') FROM jobfence_jobs WHERE queue = 'stop'`).Scan(&running, &done); err != nil {
		t.Fatal(err)
	}
	if running > 0 {
		t.Fatalf("%d jobs left running by a stopped worker (%d completed)", running, done)
	}
	if m := most.Load(); m > limit {
		t.Fatalf("%d handlers ran at once, the limit is %d", m, limit)
	}
	if s := w.Stats(); s.Completed != int64(done) {
		t.Fatalf("stats %+v, %d jobs completed in the table: want them alike", s, done)
	}
}
