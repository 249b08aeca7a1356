package worker_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type bouncedArgs struct {
	N int `json:"n"`
}

func (bouncedArgs) Kind() string { return "bounced" }

// TestPgBouncerFleetPollOnly: four worker instances, each with a pool of
// its own through PgBouncer in transaction mode (pool size 4, pgx exec
// mode, poll-only), burn down plain and transactional jobs. The
// transactional ones begin with SET LOCAL and complete with set_config:
// every effect commits once, no outcome is stale, and the server never
// sees more connections than the pool size.
func TestPgBouncerFleetPollOnly(t *testing.T) {
	const total, poolSize = 2000, 4
	db := pgtest.NewBounced(t, pgtest.BouncedOptions{PoolSize: poolSize})
	ctx := context.Background()
	// As the role, so that the role's handlers may write to it.
	producerPool := db.BouncedPool(t, 2)
	makeEffects(t, producerPool)
	producer := pgqueue.New(producerPool, pgqueue.Config{PollOnly: true})
	ps := make([]queue.EnqueueParams, total)
	for i := range ps {
		kind := "effect"
		if i%2 == 0 {
			kind = "bounced"
		}
		ps[i] = queue.EnqueueParams{Kind: kind, Args: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	if _, err := producer.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[effectArgs]) error {
		_, err := tx.Exec(ctx, "INSERT INTO effects (job_id, n, fence) VALUES ($1, $2, $3)", job.ID, job.Args.N, job.Fence)
		return err
	})
	worker.Add(reg, func(ctx context.Context, job *worker.Job[bouncedArgs]) error { return nil })
	var workers []*worker.Worker
	for i := range 4 {
		c := pgqueue.New(db.BouncedPool(t, 6), pgqueue.Config{PollOnly: true})
		workers = append(workers, startWorker(t, c, reg, worker.Config{
			ID: fmt.Sprint("bounced-", i), Queues: map[string]int{queue.DefaultQueue: 20},
			PollInterval: 100 * time.Millisecond,
		}))
	}
	maxConns := 0
	testwatch.WaitFor(t, 3*time.Minute, "every job completed", func() bool {
		n, err := db.ServerConns(ctx)
		if err != nil {
			t.Fatal(err)
		}
		maxConns = max(maxConns, n)
		var done int64
		for _, w := range workers {
			s := w.Stats()
			if s.FetchErrors+s.FinishErrors > 0 {
				t.Fatalf("worker %s: %+v: claims or outcomes failed through PgBouncer", w.ID(), s)
			}
			done += s.Completed
		}
		return done == total
	})
	rows, distinct := countEffects(t, producerPool)
	if rows != total/2 || distinct != total/2 {
		t.Fatalf("effects: %d rows for %d jobs, want %d once each", rows, distinct, total/2)
	}
	for _, w := range workers {
		if s := w.Stats(); s.Stale != 0 || s.FetchErrors != 0 || s.FinishErrors != 0 || s.Lost != 0 {
			t.Fatalf("worker %s: %+v, want no stale outcome, error or lost job", w.ID(), s)
		}
	}
	if maxConns > poolSize {
		t.Fatalf("the server saw %d connections of the fleet, more than PgBouncer's pool size %d", maxConns, poolSize)
	}
	t.Logf("server connections: at most %d for 4 instances of 6 connections each", maxConns)
}

// blockUntilCancelled registers a handler for kind "effect" that reports
// its job's ID on started and returns, once its context ends, the cause.
func blockUntilCancelled(reg *worker.Registry, started chan<- int64, causes chan<- error) {
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error {
		started <- job.ID
		<-ctx.Done()
		causes <- context.Cause(ctx)
		return ctx.Err()
	})
}

// TestPgBouncerCancelAtHeartbeat: poll-only, a cancelled running job
// learns of it at the worker's next heartbeat, which finds the claim
// gone; its handler is cancelled and no stale outcome is recorded.
func TestPgBouncerCancelAtHeartbeat(t *testing.T) {
	db := pgtest.NewBounced(t, pgtest.BouncedOptions{PoolSize: 4})
	ctx := context.Background()
	c := pgqueue.New(db.BouncedPool(t, 6), pgqueue.Config{PollOnly: true})
	started, causes := make(chan int64, 1), make(chan error, 1)
	reg := worker.NewRegistry()
	blockUntilCancelled(reg, started, causes)
	w := startWorker(t, c, reg, worker.Config{Lease: 3 * time.Second, PollInterval: 50 * time.Millisecond})
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "effect", Args: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(time.Minute):
		t.Fatal("the job did not start within a minute by polling")
	}
	if err := c.Cancel(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, worker.ErrLeaseLost) {
			t.Fatalf("handler's cause: %v, want ErrLeaseLost (the heartbeat found the claim gone)", cause)
		}
	case <-time.After(time.Minute):
		t.Fatal("the cancelled job's handler was not cancelled within a minute")
	}
	testwatch.WaitFor(t, time.Minute, "the handler's end accounted", func() bool { return w.Stats().Lost == 1 })
	if s := w.Stats(); s.Stale != 0 {
		t.Fatalf("stats %+v: a cancelled job's handler must record no stale outcome", s)
	}
	if j := stateOf(t, c, res.ID); j.State != queue.StateCancelled {
		t.Fatalf("job state %s, want cancelled", j.State)
	}
}

// TestPgBouncerListenURL: with the pool through PgBouncer and LISTEN on a
// direct connection (pgqueue.Config.ListenURL), a job enqueued to an idle
// queue starts on its wake-up, not at a poll a minute away, and a cancel
// notification reaches the handler long before any heartbeat.
func TestPgBouncerListenURL(t *testing.T) {
	db := pgtest.NewBounced(t, pgtest.BouncedOptions{PoolSize: 4})
	ctx := context.Background()
	c := pgqueue.New(db.BouncedPool(t, 6), pgqueue.Config{ListenURL: db.DirectURL})
	started, causes := make(chan int64, 1), make(chan error, 1)
	reg := worker.NewRegistry()
	blockUntilCancelled(reg, started, causes)
	startWorker(t, c, reg, worker.Config{Lease: 10 * time.Minute, PollInterval: 10 * time.Minute})
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "effect", Args: []byte(`{"n":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(2 * time.Minute):
		t.Fatal("no wake-up through the direct LISTEN connection: the job did not start")
	}
	if err := c.Cancel(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case cause := <-causes:
		if !errors.Is(cause, worker.ErrJobCancelled) {
			t.Fatalf("handler's cause: %v, want ErrJobCancelled (the notification)", cause)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("the cancel notification did not arrive through the direct LISTEN connection")
	}
}

// TestPgBouncerPausePollOnly: poll-only through PgBouncer, a paused queue
// stops the worker within about a second (a poll of the paused set), and
// the worker reports itself to the registry.
func TestPgBouncerPausePollOnly(t *testing.T) {
	db := pgtest.NewBounced(t, pgtest.BouncedOptions{PoolSize: 4})
	c := pgqueue.New(db.BouncedPool(t, 6), pgqueue.Config{PollOnly: true, Logger: quietLogger()})
	checkPause(t, c, pollPauseBound)
	ws, err := c.Workers(context.Background())
	if err != nil || len(ws) != 1 || !ws[0].Live {
		t.Fatalf("registry through PgBouncer: %+v, %v; want the one live worker", ws, err)
	}
}

// BenchmarkPgBouncerPollOnlyLatency measures enqueue-to-start of one job
// on a poll-only worker through PgBouncer (PollInterval 1s, the default):
// "busy" enqueues right after the previous job started (the last claim
// found a job, so the next poll is PollInterval/16 away); "idle" first
// lets the worker's polls back off to PollInterval. It reports the mean
// as ms-to-start.
func BenchmarkPgBouncerPollOnlyLatency(b *testing.B) {
	for _, idle := range []bool{false, true} {
		name := "busy"
		if idle {
			name = "idle"
		}
		b.Run(name, func(b *testing.B) {
			db := pgtest.NewBounced(b, pgtest.BouncedOptions{PoolSize: 4})
			ctx := context.Background()
			c := pgqueue.New(db.BouncedPool(b, 6), pgqueue.Config{PollOnly: true})
			started := make(chan time.Time, 1)
			reg := worker.NewRegistry()
			worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error {
				started <- time.Now()
				return nil
			})
			w, err := worker.New(c, reg, worker.Config{Logger: quietLogger()})
			if err != nil {
				b.Fatal(err)
			}
			if err := w.Start(ctx); err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { w.Stop(context.Background()) })
			var total time.Duration
			for b.Loop() {
				if idle {
					b.StopTimer()
					time.Sleep(3 * time.Second)
					b.StartTimer()
				}
				at := time.Now()
				if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "effect", Args: []byte(`{"n":1}`)}); err != nil {
					b.Fatal(err)
				}
				total += (<-started).Sub(at)
			}
			b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms-to-start")
		})
	}
}
