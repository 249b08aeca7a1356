package worker_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
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

func TestMain(m *testing.M) {
	if os.Getenv(frozenChildEnv) != "" {
		// Re-executed by TestFrozenTxHolderLosesTheJob as the worker that freezes.
		os.Exit(frozenTxChild())
	}
	if os.Getenv(registryChildEnv) != "" {
		// Re-executed by TestWorkerRegistry as the worker it kills.
		os.Exit(registryChild())
	}
	if os.Getenv(limitsChildEnv) != "" {
		// Re-executed by TestLimitsUnderFaults as a member of its fleet.
		os.Exit(limitsChild())
	}
	if os.Getenv(durFaultChildEnv) != "" {
		// Re-executed by TestDurableStepsUnderFaults as a member of its fleet.
		os.Exit(durFaultChild())
	}
	pgtest.Main(m)
}

type effectArgs struct {
	N int `json:"n"`
}

func (effectArgs) Kind() string { return "effect" }

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(&bytes.Buffer{}, &slog.HandlerOptions{Level: slog.LevelError + 1}))
}

func startWorker(t *testing.T, b queue.Backend, reg *worker.Registry, cfg worker.Config) *worker.Worker {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = quietLogger()
	}
	w, err := worker.New(b, reg, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		w.Stop(ctx)
	})
	return w
}

func stateOf(t *testing.T, c *pgqueue.Client, id int64) *queue.Job {
	t.Helper()
	j, err := c.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

func makeEffects(t *testing.T, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), "CREATE TABLE effects (job_id bigint NOT NULL, n int NOT NULL, fence bigint NOT NULL)"); err != nil {
		t.Fatal(err)
	}
}

func countEffects(t *testing.T, pool *pgxpool.Pool) (rows, distinct int) {
	t.Helper()
	if err := pool.QueryRow(context.Background(), "SELECT count(*), count(DISTINCT job_id) FROM effects").Scan(&rows, &distinct); err != nil {
		t.Fatal(err)
	}
	return rows, distinct
}

// TestFourWorkersExactlyOnce: 4 workers, each on its own pool, burn down
// 8,000 jobs whose effect (a row) commits with the fenced completion.
func TestFourWorkersExactlyOnce(t *testing.T) {
	const total = 8000
	db := pgtest.New(t)
	makeEffects(t, db.Pool)
	ctx := context.Background()
	ps := make([]queue.EnqueueParams, total)
	for i := range ps {
		ps[i] = queue.EnqueueParams{Kind: "effect", Args: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	if _, err := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()}).EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	var workers []*worker.Worker
	for i := range 4 {
		c := pgqueue.New(db.NewPool(t, 8), pgqueue.Config{Logger: quietLogger()})
		reg := worker.NewRegistry()
		worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[effectArgs]) error {
			_, err := tx.Exec(ctx, "INSERT INTO effects (job_id, n, fence) VALUES ($1, $2, $3)", job.ID, job.Args.N, job.Fence)
			return err
		})
		workers = append(workers, startWorker(t, c, reg, worker.Config{ID: fmt.Sprint("w", i), Queues: map[string]int{"default": 20}}))
	}
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	testwatch.WaitFor(t, 3*time.Minute, "all jobs completed", func() bool {
		counts, err := c.Counts(ctx, "")
		return err == nil && counts[queue.StateCompleted] == total
	})
	rows, distinct := countEffects(t, db.Pool)
	if rows != total || distinct != total {
		t.Fatalf("effects: %d rows, %d distinct jobs; want %d and %d", rows, distinct, total, total)
	}
	// A worker counts a completion just after its commit is visible, so
	// the counters may trail the table for a moment.
	completed := func() (sum int64) {
		for _, w := range workers {
			sum += w.Stats().Completed
		}
		return sum
	}
	deadline := time.Now().Add(10 * time.Second)
	for completed() < total && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if sum := completed(); sum != total {
		var stats []worker.Stats
		for _, w := range workers {
			stats = append(stats, w.Stats())
		}
		t.Fatalf("workers report %d completions, want %d; stats %+v", sum, total, stats)
	}
	for i, w := range workers {
		s := w.Stats()
		if s.Completed == 0 {
			t.Errorf("worker %d completed nothing: %+v", i, s)
		}
		// A heartbeat that races a job's own completion finds the claim
		// gone; that is not a lost job.
		if s.Lost != 0 {
			t.Errorf("worker %d reports %d jobs lost, though every job completed under its first claim: %+v", i, s.Lost, s)
		}
	}
}

// blockingHeartbeats wraps a real backend and holds heartbeats until
// released, deaf to their deadline: the worker's heartbeat loop is frozen
// as a paused process's would be, so only the fence can stop its writes.
type blockingHeartbeats struct {
	*pgqueue.Client
	release chan struct{}
}

func (b *blockingHeartbeats) Heartbeat(ctx context.Context, leases []queue.Lease, d time.Duration) ([]queue.Lease, error) {
	<-b.release
	return b.Client.Heartbeat(context.Background(), leases, d)
}

// TestOutlivedLeaseIsFencedOut: worker A's handler outlives its lease with
// heartbeats blocked; the job is rescued and finished by B. A's handler is
// told its lease is lost, PostgreSQL ended its idle transaction, and the
// effect is applied once, by B.
func TestOutlivedLeaseIsFencedOut(t *testing.T) {
	db := pgtest.New(t)
	makeEffects(t, db.Pool)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	res, err := c.Insert(ctx, effectArgs{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}

	aStarted, aWake, aDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	regA := worker.NewRegistry()
	worker.AddTx(regA, func(ctx context.Context, tx pgx.Tx, job *worker.Job[effectArgs]) error {
		close(aStarted)
		<-aWake // paused past its lease, blind to its context
		_, err := tx.Exec(context.Background(), "INSERT INTO effects (job_id, n, fence) VALUES ($1, $2, $3)", job.ID, job.Args.N, job.Fence)
		aDone <- err
		return err
	})
	backendA := &blockingHeartbeats{Client: pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quietLogger()}), release: make(chan struct{})}
	// One slot, held by the paused handler: A claims nothing else meanwhile,
	// as a paused process would not. The lease is long enough for A's claim
	// to come back on a loaded machine (a claim is cut off at the lease,
	// and A, which rescues nothing, would never see that claim's job again).
	a := startWorker(t, backendA, regA, worker.Config{ID: "A", Lease: 2 * time.Second, DisableMaintenance: true,
		Queues: map[string]int{"default": 1}})
	select {
	case <-aStarted:
	case <-time.After(time.Minute):
		t.Fatal("A did not start the job")
	}

	regB := worker.NewRegistry()
	worker.AddTx(regB, func(ctx context.Context, tx pgx.Tx, job *worker.Job[effectArgs]) error {
		_, err := tx.Exec(ctx, "INSERT INTO effects (job_id, n, fence) VALUES ($1, $2, $3)", job.ID, job.Args.N, job.Fence)
		return err
	})
	b := startWorker(t, pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quietLogger()}), regB,
		worker.Config{ID: "B", Lease: 5 * time.Second, RescueInterval: 200 * time.Millisecond, PollInterval: 100 * time.Millisecond})
	testwatch.WaitFor(t, 30*time.Second, "B to complete the rescued job", func() bool { return b.Stats().Completed == 1 })

	close(aWake)
	select {
	case err := <-aDone:
		if err == nil {
			t.Fatal("A's write in a transaction idle past its lease succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("A's handler did not return")
	}
	close(backendA.release)
	testwatch.WaitFor(t, 30*time.Second, "A counts the job lost", func() bool { return a.Stats().Lost == 1 })

	rows, distinct := countEffects(t, db.Pool)
	if rows != 1 || distinct != 1 {
		t.Fatalf("effects: %d rows; want exactly 1", rows)
	}
	j := stateOf(t, c, res.ID)
	var fence int64
	db.Pool.QueryRow(ctx, "SELECT fence FROM effects").Scan(&fence)
	if j.State != queue.StateCompleted || j.Attempt != 2 || fence != j.Fence || j.AttemptedBy[0] != "A" || j.AttemptedBy[1] != "B" {
		t.Fatalf("job %+v, effect fence %d", j, fence)
	}
	if a.Stats().Completed != 0 {
		t.Fatalf("A reports a completion: %+v", a.Stats())
	}
}

type badArgs struct {
	N int `json:"n"`
}

func (badArgs) Kind() string { return "typed" }

func TestBadInput(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	logs := &logbuf.Buffer{}
	reg := worker.NewRegistry()
	var ran atomic.Int64
	worker.Add(reg, func(ctx context.Context, job *worker.Job[badArgs]) error { ran.Add(1); return nil })
	w := startWorker(t, c, reg, worker.Config{Logger: slog.New(slog.NewTextHandler(logs, nil)), PollInterval: 50 * time.Millisecond})

	unknown, _ := c.Enqueue(ctx, queue.EnqueueParams{Kind: "nobody-handles-this"})
	undecodable, _ := c.Enqueue(ctx, queue.EnqueueParams{Kind: "typed", Args: []byte(`{"n":"not a number"}`)})
	testwatch.WaitFor(t, 20*time.Second, "both bad jobs attempted", func() bool {
		return stateOf(t, c, unknown.ID).State == queue.StateScheduled && stateOf(t, c, undecodable.ID).State == queue.StateDiscarded
	})
	tests := []struct {
		name    string
		id      int64
		state   queue.State
		attempt int
		wantErr string
	}{
		// A rolling deploy: an instance that knows the kind will run it, so
		// this one puts it back without spending one of its attempts.
		{"unknown kind is put back", unknown.ID, queue.StateScheduled, 0, `jobfence: unknown job kind "nobody-handles-this": no handler registered in worker`},
		{"undecodable args are discarded with the reason", undecodable.ID, queue.StateDiscarded, 1, `jobfence: job args do not decode into worker_test.badArgs: json: cannot unmarshal string`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			j := stateOf(t, c, tt.id)
			if j.State != tt.state || j.Attempt != tt.attempt || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, tt.wantErr) ||
				j.Errors[0].PutBack != (tt.attempt == 0) {
				t.Fatalf("job: state=%s attempt=%d errors=%+v; want %s, attempt %d, with %q", j.State, j.Attempt, j.Errors, tt.state, tt.attempt, tt.wantErr)
			}
			t.Logf("the error a user sees on the job: %s", j.Errors[0].Error)
		})
	}
	if ran.Load() != 0 {
		t.Fatal("handler ran for undecodable args")
	}
	if !strings.Contains(logs.String(), "job args do not decode; discarded") || !strings.Contains(logs.String(), "job of unknown kind; put back without spending an attempt") {
		t.Fatalf("logs lack the errors:\n%s", logs.String())
	}
	// Nothing is lost: the discarded job comes back once the args are fixed.
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET args = '{"n": 7}' WHERE id = $1`, undecodable.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Retry(ctx, undecodable.ID); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 20*time.Second, "the fixed job to complete", func() bool {
		return stateOf(t, c, undecodable.ID).State == queue.StateCompleted
	})
	if ran.Load() != 1 || w.Stats().Discarded != 1 {
		t.Fatalf("ran=%d stats=%+v", ran.Load(), w.Stats())
	}
}

type panicArgs struct{}

func (panicArgs) Kind() string { return "panics" }

type outcomeArgs struct {
	Do string `json:"do"`
}

func (outcomeArgs) Kind() string { return "outcome" }

func TestHandlerOutcomes(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[panicArgs]) error { panic("kaboom") })
	worker.Add(reg, func(ctx context.Context, job *worker.Job[outcomeArgs]) error {
		switch job.Args.Do {
		case "fail":
			return errors.New("upstream said no")
		case "snooze":
			return worker.JobSnooze(time.Hour)
		case "cancel":
			return worker.JobCancel(errors.New("customer closed the account"))
		case "timeout":
			<-ctx.Done()
			return ctx.Err()
		}
		return nil
	}, worker.HandlerOptions{Timeout: 200 * time.Millisecond})
	w := startWorker(t, c, reg, worker.Config{PollInterval: 50 * time.Millisecond})

	tests := []struct {
		name      string
		args      queue.Args
		state     queue.State
		attempt   int
		errSubstr string
		trace     bool
	}{
		{"panic is recovered with its stack", panicArgs{}, queue.StateRetryable, 1, "jobfence: handler panicked: kaboom", true},
		{"error retries with backoff", outcomeArgs{"fail"}, queue.StateRetryable, 1, "upstream said no", false},
		{"snooze keeps the attempt", outcomeArgs{"snooze"}, queue.StateScheduled, 0, "", false},
		{"cancel", outcomeArgs{"cancel"}, queue.StateCancelled, 1, "customer closed the account", false},
		{"timeout", outcomeArgs{"timeout"}, queue.StateRetryable, 1, "jobfence: job timed out after 200ms", false},
		{"success", outcomeArgs{"ok"}, queue.StateCompleted, 1, "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := c.Insert(ctx, tt.args, nil)
			if err != nil {
				t.Fatal(err)
			}
			testwatch.WaitFor(t, 20*time.Second, "outcome", func() bool { return stateOf(t, c, res.ID).State == tt.state })
			j := stateOf(t, c, res.ID)
			if j.Attempt != tt.attempt {
				t.Fatalf("attempt = %d, want %d", j.Attempt, tt.attempt)
			}
			if tt.errSubstr == "" {
				if len(j.Errors) != 0 {
					t.Fatalf("errors = %+v", j.Errors)
				}
				return
			}
			if len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, tt.errSubstr) || (j.Errors[0].Trace != "") != tt.trace {
				t.Fatalf("errors = %+v, want %q (trace %v)", j.Errors, tt.errSubstr, tt.trace)
			}
			if tt.state == queue.StateRetryable && !j.ScheduledAt.After(time.Now()) {
				t.Fatalf("retry not backed off: scheduled %v", j.ScheduledAt)
			}
		})
	}
	if w.Stats().Panics != 1 {
		t.Fatalf("stats = %+v", w.Stats())
	}
}

func TestCancelRunningJob(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	started := make(chan struct{})
	cause := make(chan error, 1)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error {
		close(started)
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	})
	startWorker(t, c, reg, worker.Config{})
	res, _ := c.Insert(ctx, effectArgs{}, nil)
	<-started
	if err := c.Cancel(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-cause:
		if !errors.Is(err, worker.ErrJobCancelled) {
			t.Fatalf("cause = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("handler context not cancelled")
	}
	time.Sleep(100 * time.Millisecond)
	if j := stateOf(t, c, res.ID); j.State != queue.StateCancelled {
		t.Fatalf("state = %s", j.State)
	}
}

// TestStopWithJobsInFlight: a graceful Stop drains running jobs; a Stop
// whose deadline passes puts the rest back without spending an attempt, and
// another worker finishes them. Every job's effect happens once.
func TestStopWithJobsInFlight(t *testing.T) {
	db := pgtest.New(t)
	makeEffects(t, db.Pool)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	const n = 20
	for i := range n {
		if _, err := c.Insert(ctx, effectArgs{N: i}, nil); err != nil {
			t.Fatal(err)
		}
	}
	var running atomic.Int64
	stopping := make(chan struct{})
	handler := func(slow bool) func(ctx context.Context, tx pgx.Tx, job *worker.Job[effectArgs]) error {
		return func(ctx context.Context, tx pgx.Tx, job *worker.Job[effectArgs]) error {
			running.Add(1)
			defer running.Add(-1)
			if slow && job.Args.N%2 == 0 {
				<-ctx.Done() // only stops when told to
				return ctx.Err()
			}
			if slow {
				<-stopping // finishes soon after Stop begins
				time.Sleep(100 * time.Millisecond)
			}
			_, err := tx.Exec(ctx, "INSERT INTO effects (job_id, n, fence) VALUES ($1, $2, $3)", job.ID, job.Args.N, job.Fence)
			return err
		}
	}
	regA := worker.NewRegistry()
	worker.AddTx(regA, handler(true))
	// Each running transactional handler holds a connection.
	ca := pgqueue.New(db.NewPool(t, n+pgqueue.DefaultTxReserve), pgqueue.Config{Logger: quietLogger()})
	a, err := worker.New(ca, regA, worker.Config{Logger: quietLogger(), Queues: map[string]int{"default": n}})
	if err != nil {
		t.Fatal(err)
	}
	a.Start(ctx)
	testwatch.WaitFor(t, 20*time.Second, "all jobs running", func() bool { return running.Load() == n })
	stopCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
	close(stopping)
	err = a.Stop(stopCtx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want the deadline reported", err)
	}
	t.Logf("Stop returned: %v", err)
	counts, _ := c.Counts(ctx, "")
	// A put-back has no delay: the job is available at once, for the next
	// claim, without waiting for a promoter.
	if counts[queue.StateCompleted] != n/2 || counts[queue.StateAvailable] != n/2 {
		t.Fatalf("after stop: %v; want %d completed (drained) and %d put back", counts, n/2, n/2)
	}
	var spent int
	db.Pool.QueryRow(ctx, "SELECT count(*) FROM jobfence_jobs WHERE state = 'available' AND attempt = 0").Scan(&spent)
	if spent != n/2 {
		t.Fatalf("%d of the interrupted jobs kept their attempt, want %d", spent, n/2)
	}
	regB := worker.NewRegistry()
	worker.AddTx(regB, handler(false))
	startWorker(t, pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quietLogger()}), regB, worker.Config{PollInterval: 50 * time.Millisecond})
	testwatch.WaitFor(t, 20*time.Second, "the rest completed", func() bool {
		counts, _ := c.Counts(ctx, "")
		return counts[queue.StateCompleted] == n
	})
	if rows, distinct := countEffects(t, db.Pool); rows != n || distinct != n {
		t.Fatalf("effects %d (%d distinct), want %d", rows, distinct, n)
	}
}

// TestKilledWorkerIsRescued: a worker that stops heartbeating (as if
// killed) loses its jobs to the rescuer, and another worker finishes them.
func TestKilledWorkerIsRescued(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	res, _ := c.Insert(ctx, effectArgs{N: 1}, nil)
	// A "dead" worker: it claims and then never reports.
	dead, err := c.Claim(ctx, queue.ClaimParams{Queue: "default", Limit: 1, Lease: 200 * time.Millisecond, WorkerID: "killed"})
	if err != nil || len(dead) != 1 {
		t.Fatalf("claim: %v %v", dead, err)
	}
	var ran atomic.Int64
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error { ran.Add(1); return nil })
	w := startWorker(t, pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quietLogger()}), reg,
		worker.Config{RescueInterval: 100 * time.Millisecond, PollInterval: 100 * time.Millisecond})
	testwatch.WaitFor(t, 30*time.Second, "rescued job completed", func() bool { return stateOf(t, c, res.ID).State == queue.StateCompleted })
	j := stateOf(t, c, res.ID)
	if ran.Load() != 1 || j.Attempt != 2 || len(j.Errors) != 1 || !strings.Contains(j.Errors[0].Error, "lease expired") || w.Stats().Rescued != 1 {
		t.Fatalf("ran=%d job=%+v stats=%+v", ran.Load(), j, w.Stats())
	}
}

// TestDatabaseDownAtStart: a worker started while its database is down
// logs a clear error, retries with backoff, and runs the job once the
// database is back.
func TestDatabaseDownAtStart(t *testing.T) {
	pg := startPrivatePostgres(t)
	ctx := context.Background()
	reg := worker.NewRegistry()
	var ran atomic.Int64
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error { ran.Add(1); return nil })
	if err := pg.Halt(); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, pg.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logs := &logbuf.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	c := pgqueue.New(pool, pgqueue.Config{Logger: logger})
	_, err = c.Insert(ctx, effectArgs{}, nil)
	if err == nil || !strings.Contains(err.Error(), "pgqueue: enqueue effect:") || !strings.Contains(err.Error(), "connect") {
		t.Fatalf("enqueue with the database down = %v", err)
	}
	t.Logf("enqueue error a user sees: %v", err)
	w := startWorker(t, c, reg, worker.Config{Logger: logger, PollInterval: 100 * time.Millisecond})
	testwatch.WaitFor(t, 20*time.Second, "claim errors", func() bool { return w.Stats().FetchErrors >= 2 })
	if !strings.Contains(logs.String(), "cannot claim jobs; retrying") || !strings.Contains(logs.String(), "retry_in") {
		t.Fatalf("logs:\n%s", logs.String())
	}
	if err := pg.Resume(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.Insert(ctx, effectArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "job run after the database came back", func() bool {
		j, err := c.Get(ctx, res.ID)
		return err == nil && j.State == queue.StateCompleted
	})
	if ran.Load() != 1 {
		t.Fatalf("ran %d times", ran.Load())
	}
}

func TestConfigErrors(t *testing.T) {
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error { return nil })
	tests := []struct {
		name string
		b    queue.Backend
		reg  *worker.Registry
		cfg  worker.Config
		want string
	}{
		{"no backend", nil, reg, worker.Config{}, "nil backend"},
		{"no handlers", &pgqueue.Client{}, worker.NewRegistry(), worker.Config{}, "no handlers registered"},
		{"bad concurrency", &pgqueue.Client{}, reg, worker.Config{Queues: map[string]int{"q": 0}}, `queue "q": concurrency 0 must be positive`},
		{"heartbeat", &pgqueue.Client{}, reg, worker.Config{Lease: time.Second, HeartbeatInterval: 2 * time.Second}, "HeartbeatInterval 2s must be shorter than Lease 1s"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := worker.New(tt.b, tt.reg, tt.cfg)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
		})
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), `kind "effect" is already registered`) {
			t.Fatalf("duplicate registration: %v", r)
		}
	}()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error { return nil })
}

// TestJobHeldByAStalledSessionIsRescued: a client froze after sending
// part of a batch that updates a running job's row (its BEGIN and the
// update, not the rest), and the job's worker died. The stalled session
// holds the row, which the rescuer's SKIP LOCKED passes over, and no
// timeout of PostgreSQL's ends it: the job would stay running for as long
// as the client stays frozen. The worker's maintenance ends the session
// once it has waited pgqueue.Config.StalledSession, counts it, and the
// job is rescued and runs.
func TestJobHeldByAStalledSessionIsRescued(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	res, err := c.Insert(ctx, effectArgs{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	dead, err := c.Claim(ctx, queue.ClaimParams{Queue: "default", Limit: 1, Lease: 200 * time.Millisecond, WorkerID: "killed"})
	if err != nil || len(dead) != 1 {
		t.Fatalf("claim: %v %v", dead, err)
	}
	stalled := pgtest.StallMidBatch(t, db, "BEGIN", fmt.Sprintf("UPDATE jobfence_jobs SET priority = priority WHERE id = %d", res.ID))
	var ran atomic.Int64
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error { ran.Add(1); return nil })
	w := startWorker(t, pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quietLogger(), StalledSession: time.Second}), reg,
		worker.Config{RescueInterval: 100 * time.Millisecond, PollInterval: 100 * time.Millisecond})
	testwatch.WaitFor(t, 30*time.Second, "the job held by the stalled session to complete", func() bool {
		return stateOf(t, c, res.ID).State == queue.StateCompleted
	})
	var gone bool
	if err := db.Pool.QueryRow(ctx, `SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, int32(stalled)).Scan(&gone); err != nil {
		t.Fatal(err)
	}
	if s := w.Stats(); !gone || s.EndedSessions != 1 || s.Rescued != 1 || ran.Load() != 1 {
		t.Fatalf("stalled session gone %v; stats %+v; ran %d: want it gone, one session ended, one job rescued and run once", gone, s, ran.Load())
	}
}
