package pgqueue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// reclaim makes job a's lease run out, rescues it and claims it again,
// as another worker would after a's worker froze: the new claim's fence
// is greater than a's.
func reclaim(t *testing.T, c *pgqueue.Client, a *queue.Job) *queue.Job {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Pool().Exec(ctx, `UPDATE jobfence_jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, a.ID); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Rescue(ctx, queue.RescueParams{Limit: 10}); err != nil || n != 1 {
		t.Fatalf("rescue = %d, %v", n, err)
	}
	if _, err := c.Promote(ctx, 10); err != nil {
		t.Fatal(err)
	}
	jobs := claim(t, c, "default", 1, time.Minute)
	if len(jobs) != 1 || jobs[0].ID != a.ID || jobs[0].Fence <= a.Fence {
		t.Fatalf("reclaim of job %d: %+v", a.ID, jobs)
	}
	return jobs[0]
}

// TestStepRecordedOnceUnderItsFence: a step recorded by an attempt is
// what a later attempt reads; the record of an attempt that lost its
// claim fails as stale and changes nothing, so two attempts never both
// record a step.
func TestStepRecordedOnceUnderItsFence(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "signup"}); err != nil {
		t.Fatal(err)
	}
	a := claim(t, c, "default", 1, time.Minute)[0]
	got, err := c.RecordStep(ctx, nil, a.Lease(), "customer", []byte(`{"id":"cus_1"}`))
	if err != nil || string(got) != `{"id": "cus_1"}` {
		t.Fatalf("RecordStep = %s, %v", got, err)
	}
	b := reclaim(t, c, a)
	steps, _, err := c.Steps(ctx, b.ID)
	if err != nil || len(steps) != 1 || string(steps["customer"]) != `{"id": "cus_1"}` {
		t.Fatalf("Steps after the reclaim = %v, %v; want the customer step A recorded", steps, err)
	}
	// A, now stale, records a step B has not reached: refused, nothing stored.
	_, err = c.RecordStep(ctx, nil, a.Lease(), "tenant", []byte(`"t_a"`))
	var stale *queue.StaleFenceError
	if !errors.As(err, &stale) || stale.Fence != a.Fence {
		t.Fatalf("stale RecordStep = %v, want a StaleFenceError for fence %d", err, a.Fence)
	}
	if _, _, err := c.Timer(ctx, a.Lease(), "jobfence:sleep", time.Hour, time.Time{}); !errors.Is(err, queue.ErrStaleFence) {
		t.Fatalf("stale Timer = %v, want ErrStaleFence", err)
	}
	if _, _, _, err := c.AwaitSignal(ctx, a.Lease(), "jobfence:signal:x", "x", time.Hour); !errors.Is(err, queue.ErrStaleFence) {
		t.Fatalf("stale AwaitSignal = %v, want ErrStaleFence", err)
	}
	if got, err := c.RecordStep(ctx, nil, b.Lease(), "tenant", []byte(`"t_b"`)); err != nil || string(got) != `"t_b"` {
		t.Fatalf("B's RecordStep = %s, %v", got, err)
	}
	// A second record of a step keeps the first and returns it.
	if got, err := c.RecordStep(ctx, nil, b.Lease(), "tenant", []byte(`"other"`)); err != nil || string(got) != `"t_b"` {
		t.Fatalf("second RecordStep = %s, %v; want the first record", got, err)
	}
	steps, _, _ = c.Steps(ctx, b.ID)
	if len(steps) != 2 || string(steps["tenant"]) != `"t_b"` {
		t.Fatalf("steps = %v, want customer and B's tenant", steps)
	}
}

// TestTimerKeepsItsFirstEnd: a timer's end is recorded by the database's
// clock at its first call, and a later call (a resumed attempt) reads it
// rather than starting again.
func TestTimerKeepsItsFirstEnd(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "signup"}); err != nil {
		t.Fatal(err)
	}
	a := claim(t, c, "default", 1, time.Minute)[0]
	end, now, err := c.Timer(ctx, a.Lease(), "jobfence:sleep", 48*time.Hour, time.Time{})
	if err != nil || end.Sub(now) < 47*time.Hour || end.Sub(now) > 48*time.Hour {
		t.Fatalf("Timer = %v, %v, %v; want 48h from the database's now", end, now, err)
	}
	again, _, err := c.Timer(ctx, a.Lease(), "jobfence:sleep", time.Second, time.Time{})
	if err != nil || !again.Equal(end) {
		t.Fatalf("second Timer = %v, %v; want the first end %v", again, err, end)
	}
	at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	if until, _, err := c.Timer(ctx, a.Lease(), "jobfence:sleep#2", 0, at); err != nil || !until.Equal(at) {
		t.Fatalf("Timer until %v = %v, %v", at, until, err)
	}
}

// TestSignalWaitSuspendsAndWakes: a wait with no signal suspends its job
// (scheduled, awaiting); a signal makes it ready at once, and the wait
// then takes it, once; a signal stored while the job ran, after its wait
// found none, makes the suspension ready at once instead of scheduled.
func TestSignalWaitSuspendsAndWakes(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "order"})
	if err != nil {
		t.Fatal(err)
	}
	a := claim(t, c, "default", 1, time.Minute)[0]
	out, until, now, err := c.AwaitSignal(ctx, a.Lease(), "jobfence:signal:shipped", "shipped", time.Hour)
	if err != nil || out != nil || until.Sub(now) < 59*time.Minute {
		t.Fatalf("AwaitSignal with none = %s, %v, %v, %v; want no output and an hour's timer", out, until, now, err)
	}
	stale, err := c.Finish(ctx, []queue.Finish{{Lease: a.Lease(), Outcome: queue.OutcomeSnooze, Delay: until.Sub(now), Await: "shipped"}})
	if err != nil || len(stale) != 0 {
		t.Fatalf("suspend: %v, %v", stale, err)
	}
	j, _ := c.Get(ctx, res.ID)
	if j.State != queue.StateScheduled || j.Attempt != 0 {
		t.Fatalf("suspended job: %s attempt %d, want scheduled with its attempt given back", j.State, j.Attempt)
	}
	// Another signal's name wakes nothing.
	if err := c.Signal(ctx, res.ID, "cancelled", nil); err != nil {
		t.Fatal(err)
	}
	if j, _ = c.Get(ctx, res.ID); j.State != queue.StateScheduled {
		t.Fatalf("after another name's signal: %s, want scheduled", j.State)
	}
	if err := c.Signal(ctx, res.ID, "shipped", map[string]string{"tracking": "T1"}); err != nil {
		t.Fatal(err)
	}
	if j, _ = c.Get(ctx, res.ID); j.State != queue.StateAvailable {
		t.Fatalf("after its signal: %s, want available at once", j.State)
	}
	b := claim(t, c, "default", 1, time.Minute)[0]
	out, _, _, err = c.AwaitSignal(ctx, b.Lease(), "jobfence:signal:shipped", "shipped", time.Hour)
	if err != nil || string(out) != `{"signal": {"tracking": "T1"}}` {
		t.Fatalf("AwaitSignal after the signal = %s, %v", out, err)
	}
	// The next wait does not get the same signal again.
	out, _, _, err = c.AwaitSignal(ctx, b.Lease(), "jobfence:signal:shipped#2", "shipped", time.Hour)
	if err != nil || out != nil {
		t.Fatalf("second wait = %s, %v; want none: a signal is delivered once", out, err)
	}
	// A signal that arrives after that wait found none, while the job
	// still runs: its suspension is ready at once.
	if err := c.Signal(ctx, res.ID, "shipped", 2); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Finish(ctx, []queue.Finish{{Lease: b.Lease(), Outcome: queue.OutcomeSnooze, Delay: time.Hour, Await: "shipped"}}); err != nil {
		t.Fatal(err)
	}
	if j, _ = c.Get(ctx, res.ID); j.State != queue.StateAvailable {
		t.Fatalf("suspension with its signal there: %s, want available", j.State)
	}
	d := claim(t, c, "default", 1, time.Minute)[0]
	if out, _, _, err = c.AwaitSignal(ctx, d.Lease(), "jobfence:signal:shipped#2", "shipped", time.Hour); err != nil || string(out) != `{"signal": 2}` {
		t.Fatalf("wait after the early signal = %s, %v", out, err)
	}
}

// TestSignalWaitTimesOut: a wait whose timer ended with no signal records
// the timeout, and a signal sent after it goes to the next wait.
func TestSignalWaitTimesOut(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "order"})
	if err != nil {
		t.Fatal(err)
	}
	a := claim(t, c, "default", 1, time.Minute)[0]
	if out, _, _, err := c.AwaitSignal(ctx, a.Lease(), "jobfence:signal:ok", "ok", time.Microsecond); err != nil || out != nil {
		// A wait's first call records its timer; the timeout is seen
		// from the next call on.
		if err != nil || string(out) != `{"timeout": true}` {
			t.Fatalf("first call = %s, %v", out, err)
		}
	}
	time.Sleep(10 * time.Millisecond)
	out, _, _, err := c.AwaitSignal(ctx, a.Lease(), "jobfence:signal:ok", "ok", time.Microsecond)
	if err != nil || string(out) != `{"timeout": true}` {
		t.Fatalf("after the timeout = %s, %v", out, err)
	}
	if err := c.Signal(ctx, res.ID, "ok", "late"); err != nil {
		t.Fatal(err)
	}
	if out, _, _, err = c.AwaitSignal(ctx, a.Lease(), "jobfence:signal:ok#2", "ok", time.Hour); err != nil || string(out) != `{"signal": "late"}` {
		t.Fatalf("next wait = %s, %v; want the late signal", out, err)
	}
}

// TestSignalErrors: a signal to an unknown or finished job, or with a bad
// name or payload, is refused with a clear error and stores nothing; a
// signal in a transaction exists only if it commits; a signal by unique
// key finds its job.
func TestSignalErrors(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	err := c.Signal(ctx, 987654, "x", nil)
	if !errors.Is(err, queue.ErrJobNotFound) {
		t.Fatalf("Signal of an unknown job = %v", err)
	}
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "order", UniqueKey: "order-42"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		payload any
		want    string
	}{
		{"", nil, "the name must be 1 to 200 bytes, not 0"},
		{strings.Repeat("n", 201), nil, "not 201"},
		{"x", make(chan int), "the payload does not encode as JSON"},
		{"x", strings.Repeat("p", pgqueue.MaxSignalBytes), "more than 1048576; send a reference to it"},
	} {
		err := c.Signal(ctx, res.ID, tc.name, tc.payload)
		if !errors.Is(err, pgqueue.ErrBadSignal) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Signal(%.10q) = %v, want ErrBadSignal saying %q", tc.name, err, tc.want)
		}
	}
	tx, err := c.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.SignalTx(ctx, tx, res.ID, "rolled-back", 1); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pgx.BeginFunc(ctx, c.Pool(), func(tx pgx.Tx) error { return c.SignalTx(ctx, tx, res.ID, "committed", 2) }); err != nil {
		t.Fatal(err)
	}
	id, err := c.SignalByKey(ctx, "order-42", "by-key", 3)
	if err != nil || id != res.ID {
		t.Fatalf("SignalByKey = %d, %v; want job %d", id, err, res.ID)
	}
	if _, err := c.SignalByKey(ctx, "order-43", "by-key", 3); !errors.Is(err, queue.ErrJobNotFound) || !strings.Contains(err.Error(), `no unfinished job holds unique key "order-43"`) {
		t.Fatalf("SignalByKey of an unknown key = %v", err)
	}
	var names []string
	rows, _ := c.Pool().Query(ctx, `SELECT name FROM jobfence_signals WHERE job_id = $1 ORDER BY id`, res.ID)
	names, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || strings.Join(names, ",") != "committed,by-key" {
		t.Fatalf("stored signals %v, %v; want committed,by-key", names, err)
	}
	a := claim(t, c, "default", 1, time.Minute)[0]
	if err := c.Complete(ctx, a.Lease()); err != nil {
		t.Fatal(err)
	}
	err = c.Signal(ctx, res.ID, "x", nil)
	if !errors.Is(err, pgqueue.ErrJobFinished) || !strings.Contains(err.Error(), "it is completed") {
		t.Fatalf("Signal of a completed job = %v, want ErrJobFinished saying it is completed", err)
	}
}

// TestPruneTakesStepsAndSignals: a pruned job's steps, signals and
// attempts' logs go with it; another job's stay.
func TestPruneTakesStepsAndSignals(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	var ids []int64
	for range 2 {
		res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "signup"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
		if err := c.Signal(ctx, res.ID, "later", 1); err != nil {
			t.Fatal(err)
		}
	}
	jobs := claim(t, c, "default", 2, time.Minute)
	for _, j := range jobs {
		if _, err := c.RecordStep(ctx, nil, j.Lease(), "a", []byte(`1`)); err != nil {
			t.Fatal(err)
		}
		logs := queue.AttemptLogs{Attempt: j.Attempt, Records: []queue.LogRecord{{At: time.Now(), Level: "INFO", Message: "m"}}}
		if _, err := c.RecordLogs(ctx, []queue.LogsWrite{{Lease: j.Lease(), Logs: logs}}, 10); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Complete(ctx, jobs[0].Lease()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Millisecond)
	if n, err := c.PruneStates(ctx, queue.Retention{Completed: time.Millisecond, Cancelled: time.Millisecond, Discarded: time.Millisecond}, 10); err != nil || n != 1 {
		t.Fatalf("PruneStates = %d, %v; want the completed job", n, err)
	}
	for _, tc := range []struct {
		id   int64
		want int
	}{{jobs[0].ID, 0}, {jobs[1].ID, 1}} {
		var steps, signals, logs int
		err := c.Pool().QueryRow(ctx, `SELECT (SELECT count(*) FROM jobfence_steps WHERE job_id = $1),
            (SELECT count(*) FROM jobfence_signals WHERE job_id = $1),
            (SELECT count(*) FROM jobfence_attempt_logs WHERE job_id = $1)`, tc.id).Scan(&steps, &signals, &logs)
		if err != nil || steps != tc.want || signals != tc.want || logs != tc.want {
			t.Errorf("job %d: %d steps, %d signals, %d attempts' logs (%v); want %d of each", tc.id, steps, signals, logs, err, tc.want)
		}
	}
}
