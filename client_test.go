package jobfence_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// telemetry.Options is what Config.Telemetry takes.
var _ jobfence.Telemetry = telemetry.Options{}

var quiet = slog.New(slog.DiscardHandler)

type greet struct {
	Name string `json:"name"`
}

func (greet) Kind() string { return "greet" }

type record struct {
	N int `json:"n"`
}

func (record) Kind() string { return "record" }

type tick struct{}

func (tick) Kind() string { return "tick" }

type block struct{}

func (block) Kind() string { return "block" }

// testConfig returns cfg with the short polls of a test and quiet logs.
func testConfig(cfg jobfence.Config) jobfence.Config {
	if cfg.Logger == nil {
		cfg.Logger = quiet
	}
	cfg.Worker = jobfencetest.WorkerConfig(cfg.Worker)
	cfg.Worker.Logger = nil // cfg.Logger
	return cfg
}

func newClient(t *testing.T, pool *pgxpool.Pool, cfg jobfence.Config) *jobfence.Client {
	t.Helper()
	c, err := jobfence.NewClient(pool, testConfig(cfg))
	if err != nil {
		t.Fatalf("NewClient: %v", err)
	}
	return c
}

// start starts c and stops it when the test ends, if the test did not.
func start(t *testing.T, c *jobfence.Client) {
	t.Helper()
	if err := c.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := c.Stop(ctx); err != nil && !errors.Is(err, jobfence.ErrNotStarted) {
			t.Errorf("Stop at cleanup: %v", err)
		}
	})
}

func stop(t *testing.T, c *jobfence.Client) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

func state(t *testing.T, c *jobfence.Client, id int64) queue.State {
	t.Helper()
	j, err := c.Get(context.Background(), id)
	if err != nil {
		t.Fatalf("Get %d: %v", id, err)
	}
	return j.State
}

// countJobs counts the stored jobs of kind, wherever they are: ListIn
// reads jobfence_jobs_finished too, where a job completed after the
// worker made its partitions (as it starts) has moved.
func countJobs(t *testing.T, pool *pgxpool.Pool, kind string) int {
	t.Helper()
	const most = 10_000
	jobs, err := pgqueue.ListIn(context.Background(), pool, pgqueue.ListParams{Kind: kind, Limit: most})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) == most {
		t.Fatalf("%d or more %s jobs: more than countJobs counts", most, kind)
	}
	return len(jobs)
}

// TestInsertRunsOnClientWorker: a job inserted through the client runs on
// the client's worker, a plain handler and a transactional one alike.
func TestInsertRunsOnClientWorker(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE recorded (n int PRIMARY KEY, fence bigint NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	ran := make(chan *jobfence.Job[greet], 1)
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[greet]) error {
		ran <- job
		return nil
	})
	jobfence.AddHandlerTx(reg, func(ctx context.Context, tx pgx.Tx, job *jobfence.Job[record]) error {
		_, err := tx.Exec(ctx, `INSERT INTO recorded (n, fence) VALUES ($1, $2)`, job.Args.N, job.Fence)
		return err
	})
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 2}, Handlers: reg})
	if c.Worker() == nil || c.Scheduler() == nil || c.PGQueue() == nil {
		t.Fatalf("Worker %v, Scheduler %v, PGQueue %v: want all three (the scheduler for schedules added at run time)", c.Worker(), c.Scheduler(), c.PGQueue())
	}
	start(t, c)

	res, err := c.Insert(ctx, greet{Name: "ada"}, nil)
	if err != nil || !res.Inserted {
		t.Fatalf("Insert: %+v, %v", res, err)
	}
	select {
	case job := <-ran:
		if job.ID != res.ID || job.Args.Name != "ada" || job.Fence == 0 {
			t.Fatalf("ran job %d with %+v under fence %d, want job %d with ada under a fence", job.ID, job.Args, job.Fence, res.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the inserted job did not run")
	}
	testwatch.WaitFor(t, 30*time.Second, "the greet job to complete", func() bool { return state(t, c, res.ID) == queue.StateCompleted })

	rec, err := c.Insert(ctx, record{N: 7}, &jobfence.InsertOpts{Queue: "default"})
	if err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "the record job to complete", func() bool { return state(t, c, rec.ID) == queue.StateCompleted })
	var fence int64
	if err := db.Pool.QueryRow(ctx, `SELECT fence FROM recorded WHERE n = 7`).Scan(&fence); err != nil {
		t.Fatalf("the transactional handler's row: %v", err)
	}
	if st := c.Worker().Stats(); st.Completed != 2 {
		t.Errorf("worker stats %+v, want 2 completed", st)
	}
	stop(t, c)
}

// TestInsertTxCommitsWithCallersTx: a job inserted in the caller's
// transaction exists, and runs, only if the transaction commits.
func TestInsertTxCommitsWithCallersTx(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var mu sync.Mutex
	runs := map[int64]int{}
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[greet]) error {
		mu.Lock()
		runs[job.ID]++
		mu.Unlock()
		return nil
	})
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 2}, Handlers: reg})
	start(t, c)

	var rolledBack []int64
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r, err := c.InsertTx(ctx, tx, greet{Name: "rolled back"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	rolledBack = append(rolledBack, r.ID)
	n, err := c.InsertManyTx(ctx, tx, []jobfence.InsertManyParams{{Args: greet{Name: "many 1"}}, {Args: greet{Name: "many 2"}}})
	if err != nil || n != 2 {
		t.Fatalf("InsertManyTx: %d, %v", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}

	var committed int64
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		r, err := c.InsertTx(ctx, tx, greet{Name: "committed"}, nil)
		committed = r.ID
		return err
	}); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "the committed job to complete", func() bool { return state(t, c, committed) == queue.StateCompleted })
	stop(t, c)

	if got := countJobs(t, db.Pool, "greet"); got != 1 {
		t.Errorf("%d greet jobs stored, want the committed one only", got)
	}
	for _, id := range rolledBack {
		if _, err := c.Get(ctx, id); !errors.Is(err, queue.ErrJobNotFound) {
			t.Errorf("Get of rolled-back job %d: %v, want ErrJobNotFound", id, err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if want := map[int64]int{committed: 1}; !maps.Equal(runs, want) {
		t.Errorf("runs by job %v, want %v", runs, want)
	}
}

// fires records, per client, the fires its scheduler handled.
type fires struct {
	mu sync.Mutex
	by map[int][]scheduler.Fire
}

func (f *fires) onFire(i int) func(scheduler.Fire) {
	return func(fire scheduler.Fire) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.by[i] = append(f.by[i], fire)
	}
}

// TestScheduleOneJobPerFireAcrossClients runs three clients, each its own
// instance with its own pool, configured with the same per-second
// schedule: every fire is one job, inserted by one client and run once by
// one of them. Start's context ends right after Start, which stops
// nothing. After Stop, no client enqueues a fire.
func TestScheduleOneJobPerFireAcrossClients(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const clients = 3
	var mu sync.Mutex
	runs := map[int64]int{}        // by job
	ranAt := map[time.Time]int64{} // fire → job
	rec := &fires{by: map[int][]scheduler.Fire{}}
	var fleet []*jobfence.Client
	for i := range clients {
		reg := jobfence.NewRegistry()
		jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[tick]) error {
			mu.Lock()
			defer mu.Unlock()
			runs[job.ID]++
			ranAt[job.ScheduledAt.UTC()] = job.ID
			return nil
		})
		c := newClient(t, db.NewPool(t, 6), jobfence.Config{
			Queues:    map[string]int{"cron": 2},
			Handlers:  reg,
			Schedules: []jobfence.Schedule{{Name: "tick", Spec: "* * * * * *", Args: tick{}, Options: scheduler.Options{Queue: "cron"}}},
			Scheduler: scheduler.Config{OnFire: rec.onFire(i)},
		})
		if c.Scheduler() == nil {
			t.Fatal("a client with schedules has no scheduler")
		}
		fleet = append(fleet, c)
	}
	for _, c := range fleet {
		ctx, cancel := context.WithCancel(context.Background())
		if err := c.Start(ctx); err != nil {
			t.Fatalf("Start: %v", err)
		}
		cancel() // bounds the start only
		t.Cleanup(func() { _ = c.Stop(context.Background()) })
	}
	const want = 5
	testwatch.WaitFor(t, time.Minute, fmt.Sprintf("%d fires to run", want), func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(runs) >= want
	})
	for _, c := range fleet {
		stop(t, c)
	}
	stopped := countJobs(t, db.Pool, "tick")

	rows, err := db.Pool.Query(context.Background(), `SELECT id, scheduled_at, unique_key, state FROM jobfence_jobs WHERE kind = 'tick' ORDER BY scheduled_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	type job struct {
		id    int64
		at    time.Time
		key   string
		state string
	}
	jobs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (job, error) {
		var j job
		err := r.Scan(&j.id, &j.at, &j.key, &j.state)
		return j, err
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, j := range jobs {
		if want := jobs[0].at.Add(time.Duration(i) * time.Second); !j.at.Equal(want) {
			t.Fatalf("job %d is the fire at %v, want %v (a gap or a duplicate): %+v", i, j.at, want, jobs)
		}
		if k := scheduler.UniqueKey("tick", j.at); j.key != k {
			t.Errorf("job of fire %v has key %q, want %q", j.at, j.key, k)
		}
	}
	rec.mu.Lock()
	for _, j := range jobs {
		inserted := 0
		for i := range clients {
			for _, f := range rec.by[i] {
				if f.At.Equal(j.at) && f.Inserted {
					inserted++
					if f.JobID != j.id {
						t.Errorf("client %d inserted the fire at %v as job %d, stored as job %d", i, j.at, f.JobID, j.id)
					}
				}
			}
		}
		if inserted != 1 {
			t.Errorf("the fire at %v was inserted by %d clients, want 1", j.at, inserted)
		}
	}
	rec.mu.Unlock()
	mu.Lock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("job %d ran %d times, want once", id, n)
		}
	}
	if len(runs) < want {
		t.Errorf("%d fires ran, want at least %d", len(runs), want)
	}
	mu.Unlock()

	// Stop stopped the schedulers: two more seconds, no more fires.
	time.Sleep(2200 * time.Millisecond)
	if n := countJobs(t, db.Pool, "tick"); n != stopped {
		t.Errorf("%d tick jobs 2s after every client stopped, %d when they stopped: a scheduler kept firing", n, stopped)
	}
}

// TestStopWithinDeadline: Stop stops the scheduler and the worker, and
// returns soon after its deadline when a handler runs on; the handler's
// job is put back. A stopped client starts again, with a new worker.
func TestStopWithinDeadline(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var blocking atomic.Bool
	blocking.Store(true)
	started := make(chan int64, 10)
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[block]) error {
		started <- job.ID
		if blocking.Load() {
			<-ctx.Done()
			return context.Cause(ctx)
		}
		return nil
	})
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[tick]) error { return nil })
	c := newClient(t, db.Pool, jobfence.Config{
		Queues:    map[string]int{"default": 1, "cron": 1},
		Handlers:  reg,
		Schedules: []jobfence.Schedule{{Name: "tick", Spec: "* * * * * *", Args: tick{}, Options: scheduler.Options{Queue: "cron"}}},
	})
	start(t, c)
	if err := c.Start(ctx); !errors.Is(err, jobfence.ErrAlreadyStarted) {
		t.Errorf("second Start: %v, want ErrAlreadyStarted", err)
	}
	first := c.Worker()
	res, err := c.Insert(ctx, block{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-started:
	case <-time.After(30 * time.Second):
		t.Fatal("the blocking job did not start")
	}
	testwatch.WaitFor(t, 30*time.Second, "a fire's job", func() bool { return countJobs(t, db.Pool, "tick") > 0 })

	const deadline = 1500 * time.Millisecond
	stopCtx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	t0 := time.Now()
	err = c.Stop(stopCtx)
	took := time.Since(t0)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop past its deadline: %v, want an error wrapping context.DeadlineExceeded", err)
	}
	// The worker waits a second at most for cancelled handlers; this one
	// returns at once. The margin is for a busy machine.
	if took > deadline+2*time.Second {
		t.Errorf("Stop took %v with a deadline of %v", took, deadline)
	}
	t.Logf("Stop took %v with a deadline of %v: %v", took, deadline, err)
	if st := state(t, c, res.ID); st != queue.StateAvailable {
		t.Errorf("the interrupted job is %s, want put back (available)", st)
	}
	if err := c.Stop(ctx); !errors.Is(err, jobfence.ErrNotStarted) {
		t.Errorf("Stop of a stopped client: %v, want ErrNotStarted", err)
	}
	n := countJobs(t, db.Pool, "tick")
	time.Sleep(2200 * time.Millisecond)
	if m := countJobs(t, db.Pool, "tick"); m != n {
		t.Errorf("%d tick jobs 2s after Stop, %d at Stop: the scheduler kept firing", m, n)
	}

	// Started again: a new worker runs the put-back job, and the schedule fires again.
	blocking.Store(false)
	start(t, c)
	if c.Worker() == first {
		t.Error("the restarted client runs the stopped worker")
	}
	testwatch.WaitFor(t, 30*time.Second, "the put-back job to complete", func() bool { return state(t, c, res.ID) == queue.StateCompleted })
	testwatch.WaitFor(t, 30*time.Second, "a fire after the restart", func() bool { return countJobs(t, db.Pool, "tick") > n })
	stop(t, c)
}

// TestRuntimeScheduleOnClients: clients that work queues but configure no
// schedule fire a schedule added while they run, from outside (as
// `jobfence schedules add` does) and through a client's scheduler, one job
// per fire.
func TestRuntimeScheduleOnClients(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var mu sync.Mutex
	runs := map[int64]int{}
	var fleet []*jobfence.Client
	for range 2 {
		reg := jobfence.NewRegistry()
		jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[tick]) error {
			mu.Lock()
			runs[job.ID]++
			mu.Unlock()
			return nil
		})
		c := newClient(t, db.NewPool(t, 6), jobfence.Config{
			Queues:    map[string]int{"cron": 1},
			Handlers:  reg,
			Scheduler: scheduler.Config{SyncInterval: 200 * time.Millisecond},
		})
		start(t, c)
		fleet = append(fleet, c)
	}
	if _, err := scheduler.Put(ctx, db.Pool, "outside", "* * * * * *", "tick", nil, scheduler.Options{Queue: "cron"}); err != nil {
		t.Fatal(err)
	}
	if _, err := fleet[0].Scheduler().Put(ctx, "inside", "* * * * * *", "tick", nil, scheduler.Options{Queue: "cron"}); err != nil {
		t.Fatal(err)
	}
	ran := func(prefix string) bool {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE unique_key LIKE $1 AND state = 'completed'`, prefix+"%").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n >= 2
	}
	testwatch.WaitFor(t, time.Minute, "two fires of each schedule to run", func() bool { return ran("cron:outside:") && ran("cron:inside:") })
	for _, c := range fleet {
		stop(t, c)
	}
	mu.Lock()
	defer mu.Unlock()
	for id, n := range runs {
		if n != 1 {
			t.Errorf("job %d ran %d times, want once", id, n)
		}
	}
}

// TestInsertOnlyClient: a client without queues inserts, builds no worker,
// and has nothing to start.
func TestInsertOnlyClient(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	c, err := jobfence.NewClient(db.Pool, jobfence.Config{}) // the zero Config
	if err != nil {
		t.Fatal(err)
	}
	if c.Worker() != nil || c.Scheduler() != nil {
		t.Errorf("an insert-only client has worker %v, scheduler %v", c.Worker(), c.Scheduler())
	}
	r, err := c.Insert(ctx, greet{Name: "ada"}, &jobfence.InsertOpts{Queue: "mail", UniqueKey: "ada"})
	if err != nil || !r.Inserted {
		t.Fatalf("Insert: %+v, %v", r, err)
	}
	again, err := c.Insert(ctx, greet{Name: "ada"}, &jobfence.InsertOpts{Queue: "mail", UniqueKey: "ada"})
	if err != nil || again.Inserted || again.ID != r.ID {
		t.Errorf("Insert of a taken unique key: %+v, %v, want job %d not inserted", again, err, r.ID)
	}
	n, err := c.InsertMany(ctx, []jobfence.InsertManyParams{
		{Args: greet{Name: "a"}},
		{Args: greet{Name: "b"}, InsertOpts: &jobfence.InsertOpts{Priority: 2}},
		{Args: greet{Name: "ada"}, InsertOpts: &jobfence.InsertOpts{Queue: "mail", UniqueKey: "ada"}},
	})
	if err != nil || n != 2 {
		t.Errorf("InsertMany: %d, %v, want 2 inserted (one key taken)", n, err)
	}
	if n, err := c.InsertMany(ctx, nil); n != 0 || err != nil {
		t.Errorf("InsertMany of no jobs: %d, %v", n, err)
	}
	if _, err := c.InsertMany(ctx, []jobfence.InsertManyParams{{Args: greet{}}, {}}); err == nil {
		t.Error("InsertMany with nil args: no error")
	}
	if _, err := c.Insert(ctx, nil, nil); err == nil {
		t.Error("Insert of nil args: no error")
	}
	if _, err := c.Insert(ctx, greet{}, &jobfence.InsertOpts{Priority: 9}); err == nil {
		t.Error("Insert with priority 9: no error")
	}
	if got := countJobs(t, db.Pool, "greet"); got != 3 {
		t.Errorf("%d jobs stored, want 3", got)
	}
	if st := state(t, c, r.ID); st != queue.StateAvailable {
		t.Errorf("job is %s, want available", st)
	}
	if err := c.Start(ctx); !errors.Is(err, jobfence.ErrInsertOnly) {
		t.Errorf("Start: %v, want ErrInsertOnly", err)
	}
	if err := c.Stop(ctx); !errors.Is(err, jobfence.ErrNotStarted) {
		t.Errorf("Stop: %v, want ErrNotStarted", err)
	}
	qs, err := c.Queues().List(ctx)
	if err != nil || !slices.ContainsFunc(qs, func(q pgqueue.QueueInfo) bool { return q.Name == "mail" }) {
		t.Errorf("Queues: %+v, %v, want the mail queue", qs, err)
	}
	if err := c.Cancel(ctx, r.ID); err != nil {
		t.Errorf("Cancel: %v", err)
	}
	if st := state(t, c, r.ID); st != queue.StateCancelled {
		t.Errorf("cancelled job is %s", st)
	}
}

// TestScheduleOnlyClient: a client with schedules and no queues runs its
// scheduler alone: the fires' jobs wait for another process's worker.
func TestScheduleOnlyClient(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	c := newClient(t, db.Pool, jobfence.Config{
		Schedules: []jobfence.Schedule{{Name: "tick", Spec: "* * * * * *", Args: tick{}}},
	})
	if c.Worker() != nil {
		t.Error("a client without queues has a worker")
	}
	start(t, c)
	testwatch.WaitFor(t, 30*time.Second, "a fire's job", func() bool { return countJobs(t, db.Pool, "tick") > 0 })

	// Two Stops at once: one stops the client, the other waits for it
	// and finds it stopped.
	errs := make(chan error, 2)
	for range 2 {
		go func() { errs <- c.Stop(context.Background()) }()
	}
	got := []error{<-errs, <-errs}
	if !slices.ContainsFunc(got, func(err error) bool { return err == nil }) ||
		!slices.ContainsFunc(got, func(err error) bool { return errors.Is(err, jobfence.ErrNotStarted) }) {
		t.Errorf("two Stops at once returned %v, want nil and ErrNotStarted", got)
	}
}

// TestNewClientRefuses configurations that cannot be what was meant.
func TestNewClientRefuses(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[greet]) error { return nil })
	for _, tc := range []struct {
		name string
		cfg  jobfence.Config
		is   error
	}{
		{name: "queues without handlers", cfg: jobfence.Config{Queues: map[string]int{"default": 1}}},
		{name: "queues with an empty registry", cfg: jobfence.Config{Queues: map[string]int{"default": 1}, Handlers: jobfence.NewRegistry()}},
		{name: "handlers without queues", cfg: jobfence.Config{Handlers: reg}},
		{name: "queues in Worker", cfg: jobfence.Config{Queues: map[string]int{"a": 1}, Handlers: reg, Worker: worker.Config{Queues: map[string]int{"b": 1}}}},
		{name: "zero concurrency", cfg: jobfence.Config{Queues: map[string]int{"default": 0}, Handlers: reg}},
		{name: "bad spec", cfg: jobfence.Config{Schedules: []jobfence.Schedule{{Name: "s", Spec: "every day", Args: tick{}}}}, is: scheduler.ErrInvalidSpec},
		{name: "schedule without args", cfg: jobfence.Config{Schedules: []jobfence.Schedule{{Name: "s", Spec: "@hourly"}}}},
		{name: "duplicate schedule", cfg: jobfence.Config{Schedules: []jobfence.Schedule{
			{Name: "s", Spec: "@hourly", Args: tick{}}, {Name: "s", Spec: "@daily", Args: tick{}},
		}}, is: scheduler.ErrDuplicateName},
		{name: "catch-up window past the worker's retention", cfg: jobfence.Config{
			Worker:    worker.Config{Retention: time.Hour},
			Schedules: []jobfence.Schedule{{Name: "s", Spec: "@hourly", Args: tick{}, Options: scheduler.Options{CatchUpWindow: 2 * time.Hour}}},
		}, is: scheduler.ErrInvalidOptions},
	} {
		c, err := jobfence.NewClient(db.Pool, tc.cfg)
		if err == nil {
			t.Errorf("%s: NewClient returned %v and no error", tc.name, c)
			continue
		}
		if tc.is != nil && !errors.Is(err, tc.is) {
			t.Errorf("%s: %v, want an error wrapping %v", tc.name, err, tc.is)
		}
		t.Logf("%s: %v", tc.name, err)
	}
	if _, err := jobfence.NewClient(nil, jobfence.Config{}); err == nil {
		t.Error("NewClient(nil pool): no error")
	}
}

// TestStartNotMigrated: Start on a schema without jobfence's tables fails
// at once, saying so, and leaves nothing running.
func TestStartNotMigrated(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[tick]) error { return nil })
	for _, cfg := range []jobfence.Config{
		{Queues: map[string]int{"default": 1}, Handlers: reg},
		{Schedules: []jobfence.Schedule{{Name: "tick", Spec: "@hourly", Args: tick{}}}},
		{Queues: map[string]int{"default": 1}, Handlers: reg, Schedules: []jobfence.Schedule{{Name: "tick", Spec: "@hourly", Args: tick{}}}},
	} {
		c := newClient(t, db.Pool, cfg)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := c.Start(ctx)
		cancel()
		if !errors.Is(err, queue.ErrNotSetUp) {
			t.Errorf("Start: %v, want an error wrapping queue.ErrNotSetUp", err)
		}
		if err := c.Stop(context.Background()); !errors.Is(err, jobfence.ErrNotStarted) {
			t.Errorf("Stop after a failed Start: %v, want ErrNotStarted", err)
		}
	}
}

// fakeTelemetry attaches counting hooks through each component's public
// hooks, chaining those already set, as package telemetry does.
type fakeTelemetry struct {
	called                  []string
	inserts, jobEnds, fires atomic.Int64
}

func (f *fakeTelemetry) InstrumentPGQueue(cfg *pgqueue.Config) error {
	f.called = append(f.called, "pgqueue")
	cfg.InsertHook = func(ctx context.Context, ps []queue.EnqueueParams) (context.Context, map[string]string, func(int64, error)) {
		return ctx, map[string]string{"instrumented": "yes"}, func(n int64, err error) { f.inserts.Add(n) }
	}
	return nil
}

func (f *fakeTelemetry) InstrumentWorker(cfg *worker.Config) error {
	f.called = append(f.called, "worker")
	user := cfg.Hooks.JobEnd
	cfg.Hooks.JobEnd = func(ctx context.Context, job *queue.Job, end worker.JobEnd) {
		if user != nil {
			user(ctx, job, end)
		}
		f.jobEnds.Add(1)
	}
	return nil
}

func (f *fakeTelemetry) InstrumentScheduler(cfg *scheduler.Config) error {
	f.called = append(f.called, "scheduler")
	user := cfg.OnFire
	cfg.OnFire = func(fire scheduler.Fire) {
		if user != nil {
			user(fire)
		}
		f.fires.Add(1)
	}
	return nil
}

// TestTelemetryInstrumentsEachComponent: Config.Telemetry instruments the
// components the client builds, and only those, keeping the user's hooks.
func TestTelemetryInstrumentsEachComponent(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()

	insertOnly := &fakeTelemetry{}
	if _, err := jobfence.NewClient(db.Pool, jobfence.Config{Telemetry: insertOnly}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"pgqueue"}; !slices.Equal(insertOnly.called, want) {
		t.Errorf("insert-only client instrumented %v, want %v", insertOnly.called, want)
	}

	tel := &fakeTelemetry{}
	var userJobEnds, userFires atomic.Int64
	metadata := make(chan map[string]string, 1)
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[greet]) error {
		metadata <- job.Metadata
		return nil
	})
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[tick]) error { return nil })
	c := newClient(t, db.Pool, jobfence.Config{
		Queues:    map[string]int{"default": 1},
		Handlers:  reg,
		Schedules: []jobfence.Schedule{{Name: "tick", Spec: "* * * * * *", Args: tick{}}},
		Telemetry: tel,
		Worker: worker.Config{Hooks: worker.Hooks{JobEnd: func(context.Context, *queue.Job, worker.JobEnd) {
			userJobEnds.Add(1)
		}}},
		Scheduler: scheduler.Config{OnFire: func(scheduler.Fire) { userFires.Add(1) }},
	})
	if want := []string{"pgqueue", "worker", "scheduler"}; !slices.Equal(tel.called, want) {
		t.Errorf("client instrumented %v, want %v", tel.called, want)
	}
	start(t, c)
	r, err := c.Insert(ctx, greet{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "the job to complete", func() bool { return state(t, c, r.ID) == queue.StateCompleted })
	testwatch.WaitFor(t, 30*time.Second, "a fire", func() bool { return tel.fires.Load() > 0 })
	stop(t, c)
	if md := <-metadata; md["instrumented"] != "yes" {
		t.Errorf("the job's metadata %v lacks what the insert hook added", md)
	}
	if tel.inserts.Load() < 2 || tel.jobEnds.Load() < 1 {
		t.Errorf("the hooks saw %d inserts and %d job ends, want the insert and the fire's, and the job's end",
			tel.inserts.Load(), tel.jobEnds.Load())
	}
	if userJobEnds.Load() != tel.jobEnds.Load() || userFires.Load() != tel.fires.Load() {
		t.Errorf("the user's hooks saw %d job ends and %d fires, telemetry's %d and %d",
			userJobEnds.Load(), userFires.Load(), tel.jobEnds.Load(), tel.fires.Load())
	}
}

// TestTelemetryOptions instruments a client with package telemetry itself,
// on the global (no-op) providers.
func TestTelemetryOptions(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[greet]) error { return nil })
	c := newClient(t, db.Pool, jobfence.Config{
		Queues:    map[string]int{"default": 1},
		Handlers:  reg,
		Schedules: []jobfence.Schedule{{Name: "tick", Spec: "@hourly", Args: tick{}}},
		Telemetry: telemetry.Options{},
	})
	start(t, c)
	r, err := c.Insert(context.Background(), greet{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "the job to complete", func() bool { return state(t, c, r.ID) == queue.StateCompleted })
	stop(t, c)
}
