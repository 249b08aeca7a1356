package jobfence_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
)

type signup struct {
	Email string `json:"email"`
	Sleep string `json:"sleep,omitempty"`
	Fail  bool   `json:"fail,omitempty"`
}

func (signup) Kind() string { return "signup" }

// calls counts the runs of each step's function, by job and step.
type calls struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *calls) add(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[key]++
}

func (c *calls) get(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.n[key]
}

// waitState polls job id until it is in want, for 15 s at most.
func waitState(t *testing.T, c *jobfence.Client, id int64, want queue.State) *queue.Job {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		j, err := c.Get(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == want {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %d is %s after 15 s, want %s (errors %v)", id, j.State, want, j.Errors)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStepsReplayAfterAFailure: a handler that fails after two steps runs
// again from its third: the first two return what they recorded without
// running, with their keys for outside calls, and the last attempt's
// output is built from all three.
func TestStepsReplayAfterAFailure(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var ran calls
	failed := false
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[signup]) error {
		customer, err := jobfence.Step(ctx, "customer", func(ctx context.Context) (string, error) {
			ran.add("customer")
			return "cus_" + job.Args.Email + "|" + jobfence.StepKey(ctx), nil
		})
		if err != nil {
			return err
		}
		var tenants []string
		for i := range 2 {
			tenant, err := jobfence.Step(ctx, "tenant", func(ctx context.Context) (string, error) {
				ran.add("tenant")
				return fmt.Sprintf("t%d|%s", i, jobfence.StepKey(ctx)), nil
			})
			if err != nil {
				return err
			}
			tenants = append(tenants, tenant)
		}
		if !failed {
			failed = true
			return errors.New("the email provider is down")
		}
		email, err := jobfence.Step(ctx, "email", func(ctx context.Context) (bool, error) {
			ran.add("email")
			return true, nil
		})
		if err != nil {
			return err
		}
		return jobfence.RecordOutput(ctx, map[string]any{"customer": customer, "tenants": tenants, "email": email})
	})
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 1}, Handlers: reg})
	res, err := c.Insert(ctx, signup{Email: "a@example.com"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := jobfencetest.NewWorker(t, c)
	first := w.WorkNext(ctx, t, "default")
	if first.Job.State != queue.StateRetryable {
		t.Fatalf("first attempt: %s, want retryable", first.Job.State)
	}
	second := w.RetryNow(ctx, t, first)
	if second.Job.State != queue.StateCompleted {
		t.Fatalf("second attempt: %s, %v", second.Job.State, second.Err)
	}
	for step, want := range map[string]int{"customer": 1, "tenant": 2, "email": 1} {
		if got := ran.get(step); got != want {
			t.Errorf("step %s ran %d times, want %d", step, got, want)
		}
	}
	j, err := c.Get(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	key := j.IdempotencyKey()
	var out struct {
		Customer string
		Tenants  []string
		Email    bool
	}
	if err := json.Unmarshal(j.Output, &out); err != nil {
		t.Fatal(err)
	}
	got := fmt.Sprintf("%s %s %v", out.Customer, strings.Join(out.Tenants, " "), out.Email)
	if want := fmt.Sprintf("cus_a@example.com|%s/customer t0|%s/tenant t1|%s/tenant#2 true", key, key, key); got != want {
		t.Errorf("output %s\nwant   %s", got, want)
	}
	// Bad names are refused before anything runs.
	_, err = jobfence.Step(ctx, "x", func(context.Context) (int, error) { return 1, nil })
	if !errors.Is(err, jobfence.ErrNotInHandler) {
		t.Errorf("Step outside a handler = %v", err)
	}
}

// TestStepNamesAreChecked: an empty, reserved or too long step name is
// refused with a clear error, and the function does not run.
func TestStepNamesAreChecked(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var errs []string
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[signup]) error {
		for _, name := range []string{"", "jobfence:sleep", strings.Repeat("s", 201)} {
			_, err := jobfence.Step(ctx, name, func(context.Context) (int, error) { panic("ran") })
			if !errors.Is(err, jobfence.ErrBadStepName) {
				return fmt.Errorf("Step(%.12q) = %v, want ErrBadStepName", name, err)
			}
			errs = append(errs, err.Error())
		}
		_, err := jobfence.AwaitSignal[int](ctx, "approved", 0)
		errs = append(errs, err.Error())
		return nil
	})
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 1}, Handlers: reg})
	if _, err := c.Insert(ctx, signup{}, nil); err != nil {
		t.Fatal(err)
	}
	r := jobfencetest.NewWorker(t, c).WorkNext(ctx, t, "default")
	if r.Job.State != queue.StateCompleted {
		t.Fatalf("handler: %s, %v", r.Job.State, r.Err)
	}
	for i, want := range []string{
		`step "": jobfence: bad step name: a step's name must be 1 to 200 bytes and not start with "jobfence:"`,
		`step "jobfence:sleep": jobfence: bad step name`,
		`bad step name`,
		`the timeout is 0s; give the wait a bound (days are fine)`,
	} {
		if !strings.Contains(errs[i], want) {
			t.Errorf("error %d: %q, want it to say %q", i, errs[i], want)
		}
	}
}

// TestSleepFreesTheWorkerAndResumes: a job that sleeps gives its attempt
// and the worker's one slot back (another job runs meanwhile) and resumes
// after the sleep, its first step not run again.
func TestSleepFreesTheWorkerAndResumes(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var ran calls
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[signup]) error {
		if job.Args.Sleep == "" {
			ran.add("quick")
			return nil
		}
		if _, err := jobfence.Step(ctx, "welcome", func(context.Context) (int, error) {
			ran.add("welcome")
			return 1, nil
		}); err != nil {
			return err
		}
		d, _ := time.ParseDuration(job.Args.Sleep)
		if err := jobfence.Sleep(ctx, d); err != nil {
			return err
		}
		_, err := jobfence.Step(ctx, "follow-up", func(context.Context) (int, error) {
			ran.add("follow-up")
			return 2, nil
		})
		return err
	})
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 1}, Handlers: reg})
	sleeper, err := c.Insert(ctx, signup{Email: "s", Sleep: "1500ms"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	j := waitState(t, c, sleeper.ID, queue.StateScheduled)
	if j.Attempt != 0 || ran.get("welcome") != 1 {
		t.Fatalf("sleeping job: attempt %d, welcome ran %d times; want the attempt given back after one welcome", j.Attempt, ran.get("welcome"))
	}
	quick, err := c.Insert(ctx, signup{Email: "q"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, c, quick.ID, queue.StateCompleted)
	if s := state(t, c, sleeper.ID); s != queue.StateScheduled {
		t.Fatalf("the sleeper is %s while the quick job ran, want scheduled: it holds no worker", s)
	}
	j = waitState(t, c, sleeper.ID, queue.StateCompleted)
	if ran.get("welcome") != 1 || ran.get("follow-up") != 1 || j.Attempt != 1 {
		t.Fatalf("after the sleep: welcome %d, follow-up %d, attempt %d; want 1, 1, 1", ran.get("welcome"), ran.get("follow-up"), j.Attempt)
	}
	if st := c.Worker().Stats(); st.Suspended != 1 || st.StepsReplayed < 1 {
		t.Errorf("stats: suspended %d, replayed %d; want 1 and at least 1", st.Suspended, st.StepsReplayed)
	}
}

type approval struct {
	By string `json:"by"`
}

type order struct {
	N       int    `json:"n"`
	Timeout string `json:"timeout,omitempty"`
}

func (order) Kind() string { return "order" }

// TestAwaitSignalResumesWithThePayload: a job waiting for a signal holds
// no slot; the signal wakes it at once and the wait returns its payload;
// a signal sent before the job ran is not lost; a wait that times out
// says so; each signal goes to one wait.
func TestAwaitSignalResumesWithThePayload(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	var ran calls
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[order]) error {
		if _, err := jobfence.Step(ctx, "charge", func(context.Context) (int, error) {
			ran.add(fmt.Sprint("charge", job.Args.N))
			return job.Args.N, nil
		}); err != nil {
			return err
		}
		timeout := time.Hour
		if job.Args.Timeout != "" {
			timeout, _ = time.ParseDuration(job.Args.Timeout)
		}
		var got []string
		for range 2 {
			a, err := jobfence.AwaitSignal[approval](ctx, "approved", timeout)
			if errors.Is(err, jobfence.ErrSignalTimeout) {
				got = append(got, "timeout")
				continue
			}
			if err != nil {
				return err
			}
			got = append(got, a.By)
		}
		return jobfence.RecordOutput(ctx, got)
	})
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 2}, Handlers: reg})
	early, err := c.Insert(ctx, order{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Sent before the job ran: kept for its waits, in order.
	for _, by := range []string{"ann", "bob"} {
		if err := c.Signal(ctx, early.ID, "approved", approval{By: by}); err != nil {
			t.Fatal(err)
		}
	}
	waiting, err := c.Insert(ctx, order{N: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	timing, err := c.Insert(ctx, order{N: 3, Timeout: "300ms"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	start(t, c)
	if j := waitState(t, c, early.ID, queue.StateCompleted); string(j.Output) != `["ann", "bob"]` {
		t.Errorf("early job's output %s, want both signals in order", j.Output)
	}
	if j := waitState(t, c, timing.ID, queue.StateCompleted); string(j.Output) != `["timeout", "timeout"]` {
		t.Errorf("timing-out job's output %s", j.Output)
	}
	waitState(t, c, waiting.ID, queue.StateScheduled)
	if err := c.Signal(ctx, waiting.ID, "approved", approval{By: "cy"}); err != nil {
		t.Fatal(err)
	}
	// The second wait suspends again; a signal from a transaction wakes it.
	waitUntil(t, "the second wait", func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_steps WHERE job_id = $1 AND name = 'jobfence:signal:approved#2:wait'`, waiting.ID).Scan(&n)
		return err == nil && n == 1 && state(t, c, waiting.ID) == queue.StateScheduled
	})
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		return c.SignalTx(ctx, tx, waiting.ID, "approved", approval{By: "di"})
	}); err != nil {
		t.Fatal(err)
	}
	if j := waitState(t, c, waiting.ID, queue.StateCompleted); string(j.Output) != `["cy", "di"]` {
		t.Errorf("waiting job's output %s", j.Output)
	}
	for n := 1; n <= 3; n++ {
		if got := ran.get(fmt.Sprint("charge", n)); got != 1 {
			t.Errorf("job %d charged %d times, want once", n, got)
		}
	}
	if err := c.Signal(ctx, waiting.ID, "approved", nil); !errors.Is(err, jobfence.ErrJobFinished) {
		t.Errorf("Signal of a completed job = %v, want ErrJobFinished", err)
	}
}

// waitUntil polls cond for 15 s at most.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after 15 s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestStepInATransactionalHandler: a step of an AddHandlerTx handler
// records in its transaction, so a failed attempt records nothing (its
// step runs again with the transaction's writes); Sleep there is refused
// with a clear error rather than roll the transaction back.
func TestStepInATransactionalHandler(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE tenants (email text)`); err != nil {
		t.Fatal(err)
	}
	var ran calls
	reg := jobfence.NewRegistry()
	jobfence.AddHandlerTx(reg, func(ctx context.Context, tx pgx.Tx, job *jobfence.Job[signup]) error {
		if job.Args.Sleep != "" {
			return jobfence.Sleep(ctx, time.Hour)
		}
		if _, err := jobfence.Step(ctx, "tenant", func(ctx context.Context) (int, error) {
			ran.add("tenant")
			_, err := tx.Exec(ctx, `INSERT INTO tenants VALUES ($1)`, job.Args.Email)
			return 1, err
		}); err != nil {
			return err
		}
		if job.Attempt == 1 {
			return errors.New("fail after the step")
		}
		return nil
	})
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 1}, Handlers: reg})
	res, err := c.Insert(ctx, signup{Email: "t"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := jobfencetest.NewWorker(t, c)
	first := w.WorkNext(ctx, t, "default")
	if first.Job.State != queue.StateRetryable {
		t.Fatalf("first attempt %s", first.Job.State)
	}
	var steps int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_steps WHERE job_id = $1`, res.ID).Scan(&steps); err != nil || steps != 0 {
		t.Fatalf("steps after the failed attempt: %d, %v; want none (rolled back)", steps, err)
	}
	if second := w.RetryNow(ctx, t, first); second.Job.State != queue.StateCompleted {
		t.Fatalf("second attempt %s, %v", second.Job.State, second.Err)
	}
	var rows int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM tenants`).Scan(&rows); err != nil || rows != 1 || ran.get("tenant") != 2 {
		t.Fatalf("tenants %d (%v), step ran %d times; want one row, the step run twice (its first run rolled back)", rows, err, ran.get("tenant"))
	}
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_steps WHERE job_id = $1`, res.ID).Scan(&steps); err != nil || steps != 1 {
		t.Fatalf("steps after the completion: %d, %v; want 1", steps, err)
	}
	if _, err := c.Insert(ctx, signup{Email: "s", Sleep: "1h"}, nil); err != nil {
		t.Fatal(err)
	}
	r := w.WorkNext(ctx, t, "default")
	if !errors.Is(r.Err, jobfence.ErrSuspendInTx) || !strings.Contains(r.Err.Error(), "sleep in a handler added with AddHandler") {
		t.Fatalf("Sleep in a transactional handler: %v", r.Err)
	}
}

// TestSuspendedJobsAndLimits: a job that sleeps under a concurrency limit
// gives its slot up (another job of its partition runs while it sleeps),
// and one that sleeps in a sequence keeps its turn (the next job starts
// only after it has completed): the state machine's row "suspend".
func TestSuspendedJobsAndLimits(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[signup]) error {
		if job.Args.Sleep == "" {
			return nil
		}
		d, _ := time.ParseDuration(job.Args.Sleep)
		return jobfence.Sleep(ctx, d)
	})
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"conc": 4, "seq": 4}, Handlers: reg})
	for _, l := range []jobfence.Limit{
		{Name: "conc", Queue: "conc", Concurrency: 1},
		{Name: "seq", Queue: "seq", Sequence: true},
	} {
		if err := c.Limits().Set(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	var ids [4]int64
	for i, in := range []struct {
		q     string
		sleep string
	}{{"conc", "3s"}, {"conc", ""}, {"seq", "1s"}, {"seq", ""}} {
		res, err := c.Insert(ctx, signup{Email: fmt.Sprint(i), Sleep: in.sleep}, &jobfence.InsertOpts{Queue: in.q})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = res.ID
	}
	start(t, c)
	// The concurrency limit's next job runs while the first sleeps.
	waitState(t, c, ids[1], queue.StateCompleted)
	if s := state(t, c, ids[0]); s != queue.StateScheduled {
		t.Errorf("the sleeping job of the concurrency limit is %s when the next one completed, want scheduled (asleep)", s)
	}
	a := waitState(t, c, ids[2], queue.StateCompleted)
	b := waitState(t, c, ids[3], queue.StateCompleted)
	if !b.AttemptedAt.After(a.AttemptedAt) {
		t.Fatalf("sequence: the second job started at %v, the first's last attempt at %v", b.AttemptedAt, a.AttemptedAt)
	}
	var firstDone time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT finalized_at FROM jobfence_jobs WHERE id = $1
        UNION ALL SELECT finalized_at FROM jobfence_jobs_finished WHERE id = $1`, ids[2]).Scan(&firstDone); err != nil {
		t.Fatal(err)
	}
	if b.AttemptedAt.Before(firstDone) {
		t.Errorf("sequence overtaken: the second job started at %v, before the sleeping first completed at %v", b.AttemptedAt, firstDone)
	}
	waitState(t, c, ids[0], queue.StateCompleted)
}
