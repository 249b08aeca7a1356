package worker_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// TestTxHandlersDoNotStarveHeartbeats: transactional handlers each hold a
// connection while they run. With more of them than the pool has
// connections, heartbeats must still get one: every job completes on its
// first attempt and no lease is lost, even though each handler outlives
// the lease.
func TestTxHandlersDoNotStarveHeartbeats(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	makeEffects(t, db.Pool)
	const n = 12
	for i := range n {
		if _, err := pgqueue.New(db.Pool, pgqueue.Config{}).Insert(ctx, effectArgs{N: i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	const lease = time.Second
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[effectArgs]) error {
		if _, err := tx.Exec(ctx, "INSERT INTO effects (job_id, n, fence) VALUES ($1, $2, $3)", job.ID, job.Args.N, job.Fence); err != nil {
			return err
		}
		// Busy past the lease, holding its connection.
		_, err := tx.Exec(ctx, "SELECT pg_sleep($1)", (lease + lease/4).Seconds())
		return err
	})
	logs := &logbuf.Buffer{}
	// pgxpool.New's default on a small machine: 4 connections.
	c := pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quietLogger()})
	w := startWorker(t, c, reg, worker.Config{
		Lease: lease, Queues: map[string]int{"default": 16}, PollInterval: 100 * time.Millisecond,
		RescueInterval: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(logs, nil)),
	})
	testwatch.WaitFor(t, 2*time.Minute, "every job completed", func() bool {
		counts, _ := c.Counts(ctx, "")
		return counts[queue.StateCompleted] == n
	})
	// List reads the finished-jobs table too, where the completed jobs
	// have moved if the worker's partitions were made before they ran.
	jobs, err := c.List(ctx, pgqueue.ListParams{Limit: n + 1})
	if err != nil || len(jobs) != n {
		t.Fatalf("list: %d jobs, %v; want %d", len(jobs), err, n)
	}
	var reclaimed int
	for _, j := range jobs {
		if j.Attempt != 1 {
			reclaimed++
		}
	}
	if st := w.Stats(); st.Lost != 0 || st.Rescued != 0 || reclaimed != 0 {
		t.Fatalf("stats %+v, %d jobs claimed more than once: heartbeats were starved", st, reclaimed)
	}
	if rows, distinct := countEffects(t, db.Pool); rows != n || distinct != n {
		t.Fatalf("effects %d (%d distinct), want %d", rows, distinct, n)
	}
	if !strings.Contains(logs.String(), "fewer pool connections than concurrency") {
		t.Fatalf("no warning about the small pool:\n%s", logs.String())
	}
}

// TestTxHandlersNeedAConnection: a pool that has no connection beyond
// those the worker reserves cannot run transactional handlers; New says so.
func TestTxHandlersNeedAConnection(t *testing.T) {
	db := pgtest.New(t)
	reg := worker.NewRegistry()
	addEffectTx(reg)
	_, err := worker.New(pgqueue.New(db.NewPool(t, 2), pgqueue.Config{}), reg, worker.Config{Logger: quietLogger()})
	want := `kind "effect" has a transactional handler, but the backend's pool has no connection to spare for it beyond those reserved for heartbeats and claims: raise the pool's MaxConns`
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("New = %v, want %q", err, want)
	}
}

// TestRestartsGiveAttemptsBack: jobs that may fail only twice (MaxAttempts
// 2) run through three database restarts: an outage is not a failure of
// theirs, so none is discarded and none is lost, and each transactional
// job's effect commits once. Every job is running at each restart:
// transactional ones lose their connection (the worker finds the server
// restarted or unreachable, and puts them back), plain ones lose their
// lease while heartbeats fail (and are rescued as put back). Each
// put-back is on the job's errors; the first two give the attempt back,
// and the third in a row spends it (queue.PutBackLimit), so every job
// completes on its second attempt.
func TestRestartsGiveAttemptsBack(t *testing.T) {
	pg := startPrivatePostgres(t)
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	cfg.MaxConns = n + pgqueue.DefaultTxReserve
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	makeEffects(t, pool)
	c := pgqueue.New(pool, pgqueue.Config{Logger: quietLogger()})
	var ps []queue.EnqueueParams
	for i := range n {
		kind := effectArgs{}.Kind()
		if i%2 == 1 {
			kind = sleepArgs{}.Kind()
		}
		ps = append(ps, queue.EnqueueParams{Kind: kind, Args: []byte(`{"n":1}`), MaxAttempts: 2})
	}
	if _, err := c.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	var restarting atomic.Bool
	restarting.Store(true)
	var running atomic.Int64
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[effectArgs]) error {
		running.Add(1)
		defer running.Add(-1)
		for restarting.Load() {
			if _, err := tx.Exec(ctx, "SELECT pg_sleep(0.05)"); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, "INSERT INTO effects (job_id, n, fence) VALUES ($1, $2, $3)", job.ID, job.Args.N, job.Fence)
		return err
	})
	worker.Add(reg, func(ctx context.Context, job *worker.Job[sleepArgs]) error {
		running.Add(1)
		defer running.Add(-1)
		for restarting.Load() {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
		}
		return nil
	})
	// A lease of 3 s with a heartbeat every 250 ms: only the outages, not a
	// loaded machine's late heartbeat, may cost a job its lease (an expiry
	// that is not a put-back spends an attempt, and with two attempts the
	// job would be discarded).
	w := startWorker(t, c, reg, worker.Config{
		Lease: 3 * time.Second, HeartbeatInterval: 250 * time.Millisecond,
		Queues: map[string]int{"default": n}, PollInterval: 100 * time.Millisecond,
		RetryPolicy: worker.ExponentialRetry{Max: 100 * time.Millisecond},
		Logger:      slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)),
	})
	defer func() {
		if t.Failed() {
			counts, err := c.Counts(ctx, "")
			t.Logf("at the failure: %d running in handlers, jobs by state %v (%v)", running.Load(), counts, err)
		}
	}()
	for range 3 {
		testwatch.WaitFor(t, time.Minute, "every job running", func() bool { return running.Load() == n })
		if err := pg.Halt(); err != nil {
			t.Fatal(err)
		}
		// Down for longer than the lease.
		time.Sleep(3500 * time.Millisecond)
		if err := pg.Resume(ctx); err != nil {
			t.Fatal(err)
		}
	}
	testwatch.WaitFor(t, time.Minute, "every job running after the restarts", func() bool { return running.Load() == n })
	restarting.Store(false)
	testwatch.WaitFor(t, 2*time.Minute, "every job final", func() bool {
		counts, err := c.Counts(ctx, "")
		return err == nil && counts[queue.StateCompleted]+counts[queue.StateDiscarded]+counts[queue.StateCancelled] == n
	})
	counts, _ := c.Counts(ctx, "")
	if counts[queue.StateCompleted] != n {
		var errs []string
		rows, _ := pool.Query(ctx, "SELECT errors::text FROM jobfence_jobs WHERE state = 'discarded' LIMIT 2")
		for rows.Next() {
			var e string
			rows.Scan(&e)
			errs = append(errs, e)
		}
		rows.Close()
		t.Fatalf("after three restarts: %v, want all %d completed; discarded jobs' errors:\n%s", counts, n, strings.Join(errs, "\n"))
	}
	if rows, distinct := countEffects(t, pool); rows != n/2 || distinct != n/2 {
		t.Fatalf("transactional effects %d (%d distinct), want %d once each", rows, distinct, n/2)
	}
	jobs, err := c.List(ctx, pgqueue.ListParams{Limit: n})
	if err != nil || len(jobs) != n {
		t.Fatalf("list: %d jobs, %v", len(jobs), err)
	}
	for _, j := range jobs {
		// A put-back of a job that had not begun (its transaction's BEGIN
		// failing on a connection the restart broke) carries no count.
		var counted []queue.AttemptError
		for _, e := range j.Errors {
			if e.PutBacks > 0 {
				counted = append(counted, e)
			}
		}
		if j.Attempt != 2 || len(counted) != 3 || !counted[0].PutBack || !counted[1].PutBack || counted[2].PutBack ||
			counted[0].PutBacks != 1 || counted[1].PutBacks != 2 || counted[2].PutBacks != 3 {
			t.Fatalf("%s job %d: attempt %d, errors %+v; want put back twice, then the attempt spent, and completed on attempt 2", j.Kind, j.ID, j.Attempt, j.Errors)
		}
	}
	t.Logf("stats after three restarts: %+v", w.Stats())
}

type sleepArgs struct {
	N int `json:"n"`
}

func (sleepArgs) Kind() string { return "sleep" }

// TestTxTimeoutSpendsTheAttempt: pgx closes a connection whose query is
// cancelled, but a transactional handler that times out failed on its own:
// it spends its attempt (here its only one), it is not put back as an
// outage would be.
func TestTxTimeoutSpendsTheAttempt(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: effectArgs{}.Kind(), MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[effectArgs]) error {
		_, err := tx.Exec(ctx, "SELECT pg_sleep(30)")
		return err
	}, worker.HandlerOptions{Timeout: 200 * time.Millisecond})
	startWorker(t, c, reg, worker.Config{PollInterval: 50 * time.Millisecond})
	testwatch.WaitFor(t, 30*time.Second, "the timed-out job final", func() bool { return stateOf(t, c, res.ID).State.Final() })
	j := stateOf(t, c, res.ID)
	if j.State != queue.StateDiscarded || j.Attempt != 1 || len(j.Errors) != 1 || j.Errors[0].PutBack ||
		!strings.Contains(j.Errors[0].Error, "timed out") {
		t.Fatalf("job %s, attempt %d, errors %+v; want discarded after its one attempt timed out", j.State, j.Attempt, j.Errors)
	}
}
