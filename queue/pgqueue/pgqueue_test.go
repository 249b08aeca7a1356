package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

func newClient(t *testing.T) (*pgqueue.Client, *pgtest.DB) {
	t.Helper()
	db := pgtest.New(t)
	return pgqueue.New(db.Pool, pgqueue.Config{}), db
}

func claim(t *testing.T, c *pgqueue.Client, q string, n int, lease time.Duration) []*queue.Job {
	t.Helper()
	jobs, err := c.Claim(context.Background(), queue.ClaimParams{Queue: q, Limit: n, Lease: lease, WorkerID: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	return jobs
}

func TestEnqueueValidation(t *testing.T) {
	c, _ := newClient(t)
	tests := []struct {
		name string
		p    queue.EnqueueParams
		want string
	}{
		{"no kind", queue.EnqueueParams{}, "jobfence: invalid enqueue params: Kind is empty"},
		{"priority", queue.EnqueueParams{Kind: "k", Priority: 9}, "jobfence: invalid enqueue params: Priority must be between 1 and 4"},
		{"attempts", queue.EnqueueParams{Kind: "k", MaxAttempts: -1}, "jobfence: invalid enqueue params: MaxAttempts must be at least 1"},
		{"bad json", queue.EnqueueParams{Kind: "k", Args: []byte("{not json")}, "invalid input syntax for type json"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := c.Enqueue(context.Background(), tt.p)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	counts, err := c.Counts(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(counts) != 0 {
		t.Fatalf("rejected enqueues stored jobs: %v", counts)
	}
}

type emailArgs struct {
	To string `json:"to"`
}

func (emailArgs) Kind() string { return "email" }

func TestInsertAndGet(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	at := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	res, err := c.Insert(ctx, emailArgs{To: "a@example.com"}, &queue.InsertOpts{Queue: "mail", Priority: 2, ScheduledAt: at, MaxAttempts: 3})
	if err != nil || !res.Inserted {
		t.Fatalf("insert: %+v %v", res, err)
	}
	j, err := c.Get(ctx, res.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Kind != "email" || j.Queue != "mail" || j.Priority != 2 || j.MaxAttempts != 3 ||
		j.State != queue.StateScheduled || !j.ScheduledAt.Equal(at) || string(j.EncodedArgs) != `{"to": "a@example.com"}` {
		t.Fatalf("stored job = %+v (args %s)", j, j.EncodedArgs)
	}
	if got := claim(t, c, "mail", 10, time.Minute); len(got) != 0 {
		t.Fatalf("claimed a job scheduled an hour ahead: %+v", got[0])
	}
	if _, err := c.Get(ctx, 1<<40); !errors.Is(err, queue.ErrJobNotFound) {
		t.Fatalf("Get(unknown) = %v, want ErrJobNotFound", err)
	}
}

func TestUniqueKeyConcurrent(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	results := make([]queue.EnqueueResult, 20)
	errs := make([]error, 20)
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Each goroutine its own pool, like 20 instances.
			cc := pgqueue.New(db.NewPool(t, 2), pgqueue.Config{})
			results[i], errs[i] = cc.Enqueue(ctx, queue.EnqueueParams{Kind: "report", UniqueKey: "report:2026-11-22"})
		}()
	}
	wg.Wait()
	inserted := 0
	for i := range 20 {
		if errs[i] != nil {
			t.Fatalf("enqueue %d: %v", i, errs[i])
		}
		if results[i].Inserted {
			inserted++
		}
		if results[i].ID != results[0].ID {
			t.Fatalf("enqueue %d names job %d, enqueue 0 names %d", i, results[i].ID, results[0].ID)
		}
	}
	var n int
	if err := c.Pool().QueryRow(ctx, "SELECT count(*) FROM jobfence_jobs").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if inserted != 1 || n != 1 {
		t.Fatalf("inserted=%d rows=%d, want 1 and 1", inserted, n)
	}
}

func TestEnqueueTx(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	for _, commit := range []bool{false, true} {
		tx, err := db.Pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		res, err := c.EnqueueTx(ctx, tx, queue.EnqueueParams{Kind: "k", Args: []byte(`{"commit":` + fmt.Sprint(commit) + `}`)})
		if err != nil {
			t.Fatal(err)
		}
		if commit {
			err = tx.Commit(ctx)
		} else {
			err = tx.Rollback(ctx)
		}
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Get(ctx, res.ID)
		if commit && err != nil {
			t.Fatalf("committed job missing: %v", err)
		}
		if !commit && !errors.Is(err, queue.ErrJobNotFound) {
			t.Fatalf("rolled-back job exists: %v", err)
		}
	}
}

func TestEnqueueMany(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	var ps []queue.EnqueueParams
	for i := range 1000 {
		p := queue.EnqueueParams{Kind: "bulk", Args: []byte(fmt.Sprintf(`{"i":%d}`, i))}
		if i%100 == 0 {
			p.UniqueKey = fmt.Sprintf("bulk-%d", i/200) // pairs of duplicates
		}
		ps = append(ps, p)
	}
	n, err := c.EnqueueMany(ctx, ps)
	if err != nil {
		t.Fatal(err)
	}
	if n != 995 {
		t.Fatalf("inserted %d, want 995 (990 plain + 5 of 10 unique)", n)
	}
	counts, _ := c.Counts(ctx, "default")
	if counts[queue.StateAvailable] != 995 {
		t.Fatalf("counts = %v", counts)
	}
}

func TestClaimIsExclusive(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	ps := make([]queue.EnqueueParams, 3000)
	for i := range ps {
		ps[i] = queue.EnqueueParams{Kind: "k"}
	}
	if _, err := c.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[int64]int{}
	fences := map[int64]bool{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cc := pgqueue.New(db.NewPool(t, 2), pgqueue.Config{})
			for {
				jobs := claim(t, cc, "default", 50, time.Minute)
				if len(jobs) == 0 {
					return
				}
				mu.Lock()
				for _, j := range jobs {
					seen[j.ID]++
					fences[j.Fence] = true
					if j.State != queue.StateRunning || j.Attempt != 1 {
						t.Errorf("claimed job %+v", j)
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != 3000 {
		t.Fatalf("claimed %d distinct jobs, want 3000", len(seen))
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("job %d claimed %d times", id, n)
		}
	}
	if len(fences) < 3000/50 {
		t.Fatalf("%d fences for %d claims", len(fences), 3000/50)
	}
}

// TestStaleCompletion: A's lease expires, the job is rescued and claimed by
// B; A's late Complete is rejected and changes nothing.
func TestStaleCompletion(t *testing.T) {
	c, db := newClient(t)
	b := pgqueue.New(db.NewPool(t, 2), pgqueue.Config{})
	ctx := context.Background()
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "charge"})
	if err != nil {
		t.Fatal(err)
	}
	a := claim(t, c, "default", 1, 50*time.Millisecond)[0]
	time.Sleep(100 * time.Millisecond)
	if n, err := c.Rescue(ctx, queue.RescueParams{Limit: 10}); err != nil || n != 1 {
		t.Fatalf("rescue = %d, %v", n, err)
	}
	if lost, err := c.Heartbeat(ctx, []queue.Lease{a.Lease()}, time.Minute); err != nil || len(lost) != 1 {
		t.Fatalf("heartbeat of rescued job: lost=%v err=%v, want it lost", lost, err)
	}
	var bj *queue.Job
	deadline := time.Now().Add(10 * time.Second)
	for bj == nil && time.Now().Before(deadline) {
		// The rescued job is retryable, claimable once promoted, as B's
		// worker would.
		if _, err := b.Promote(ctx, 10); err != nil {
			t.Fatal(err)
		}
		if jobs := claim(t, b, "default", 1, time.Minute); len(jobs) == 1 {
			bj = jobs[0]
		}
		time.Sleep(50 * time.Millisecond)
	}
	if bj == nil || bj.ID != res.ID || bj.Fence <= a.Fence || bj.Attempt != 2 {
		t.Fatalf("B claimed %+v after A (fence %d)", bj, a.Fence)
	}
	err = c.Complete(ctx, a.Lease())
	var stale *queue.StaleFenceError
	if !errors.Is(err, queue.ErrStaleFence) || !errors.As(err, &stale) || stale.ID != a.ID || stale.Fence != a.Fence {
		t.Fatalf("A's late Complete = %v, want a StaleFenceError for job %d fence %d", err, a.ID, a.Fence)
	}
	t.Logf("the error A sees: %v", err)
	now, _ := c.Get(ctx, res.ID)
	if now.State != queue.StateRunning || now.Fence != bj.Fence || now.Attempt != 2 {
		t.Fatalf("row changed by a stale completion: %+v", now)
	}
	if err := b.Complete(ctx, bj.Lease()); err != nil {
		t.Fatalf("B's complete: %v", err)
	}
	if now, _ = c.Get(ctx, res.ID); now.State != queue.StateCompleted || len(now.Errors) != 1 {
		t.Fatalf("after B: %+v", now)
	}
}

func TestFinishOutcomes(t *testing.T) {
	tests := []struct {
		name        string
		maxAttempts int
		outcome     queue.Outcome
		wantState   queue.State
		wantAttempt int
		wantErrors  int
		wantAt      bool
	}{
		{"complete", 5, queue.OutcomeComplete, queue.StateCompleted, 1, 0, false},
		{"retry", 5, queue.OutcomeRetry, queue.StateRetryable, 1, 1, true},
		{"retry out of attempts", 1, queue.OutcomeRetry, queue.StateDiscarded, 1, 1, false},
		{"discard", 5, queue.OutcomeDiscard, queue.StateDiscarded, 1, 1, false},
		{"snooze gives the attempt back", 5, queue.OutcomeSnooze, queue.StateScheduled, 0, 0, true},
		{"cancel", 5, queue.OutcomeCancel, queue.StateCancelled, 1, 1, false},
	}
	c, db := newClient(t)
	ctx := context.Background()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := "q-" + tt.name
			if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: q, MaxAttempts: tt.maxAttempts}); err != nil {
				t.Fatal(err)
			}
			j := claim(t, c, q, 1, time.Minute)[0]
			f := queue.Finish{Lease: j.Lease(), Outcome: tt.outcome, Delay: time.Hour}
			if tt.wantErrors > 0 {
				f.Error = &queue.AttemptError{Attempt: j.Attempt, At: time.Now(), Error: "boom"}
			}
			stale, err := c.Finish(ctx, []queue.Finish{f})
			if err != nil || len(stale) != 0 {
				t.Fatalf("finish: stale=%v err=%v", stale, err)
			}
			got, _ := c.Get(ctx, j.ID)
			if got.State != tt.wantState || got.Attempt != tt.wantAttempt || len(got.Errors) != tt.wantErrors {
				t.Fatalf("got state=%s attempt=%d errors=%v", got.State, got.Attempt, got.Errors)
			}
			if tt.wantAt {
				// The delay runs from the database's clock, not the worker's.
				var secs float64
				if err := db.Pool.QueryRow(ctx, "SELECT extract(epoch FROM scheduled_at - now()) FROM jobfence_jobs WHERE id = $1", j.ID).Scan(&secs); err != nil {
					t.Fatal(err)
				}
				if secs < 3500 || secs > 3600 {
					t.Fatalf("scheduled_at is %.0fs after the database's now(), want an hour", secs)
				}
			}
			if tt.wantErrors > 0 && got.Errors[0].Error != "boom" {
				t.Fatalf("errors = %+v", got.Errors)
			}
			// A second outcome for the same claim is stale.
			stale, err = c.Finish(ctx, []queue.Finish{{Lease: j.Lease(), Outcome: queue.OutcomeComplete}})
			if err != nil || len(stale) != 1 {
				t.Fatalf("second finish: stale=%v err=%v, want it stale", stale, err)
			}
		})
	}
}

func TestCancelRetryPrune(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	res, _ := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k"})
	j := claim(t, c, "default", 1, time.Minute)[0]
	if err := c.Cancel(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	if err := c.Complete(ctx, j.Lease()); !errors.Is(err, queue.ErrStaleFence) {
		t.Fatalf("complete after cancel = %v, want stale", err)
	}
	if err := c.Cancel(ctx, res.ID); err == nil || !strings.Contains(err.Error(), "already cancelled") {
		t.Fatalf("second cancel = %v", err)
	}
	if err := c.Retry(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	j = claim(t, c, "default", 1, time.Minute)[0]
	if j.ID != res.ID || j.Attempt != 2 {
		t.Fatalf("retried job claimed as %+v", j)
	}
	if err := c.Complete(ctx, j.Lease()); err != nil {
		t.Fatal(err)
	}
	if n, err := c.Prune(ctx, time.Hour, 10); err != nil || n != 0 {
		t.Fatalf("prune within retention = %d, %v", n, err)
	}
	if n, err := c.Prune(ctx, 0, 10); err != nil || n != 1 {
		t.Fatalf("prune = %d, %v", n, err)
	}
	if err := c.Cancel(ctx, res.ID); !errors.Is(err, queue.ErrJobNotFound) {
		t.Fatalf("cancel of pruned job = %v", err)
	}
}

func TestWakeAndCancelNotifications(t *testing.T) {
	c, db := newClient(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wake, _ := c.Wake(ctx, "mail")
	cancelled, _ := c.Cancelled(ctx)
	// LISTEN starts asynchronously: enqueue until a wake-up arrives.
	deadline := time.After(10 * time.Second)
	var id int64
	for got := false; !got; {
		res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "mail"})
		if err != nil {
			t.Fatal(err)
		}
		id = res.ID
		select {
		case <-wake:
			got = true
		case <-time.After(100 * time.Millisecond):
		case <-deadline:
			t.Fatal("no wake-up")
		}
	}
	var running *queue.Job
	for _, j := range claim(t, c, "mail", 1000, time.Minute) {
		if j.ID == id {
			running = j
		}
	}
	if running == nil {
		t.Fatalf("job %d not claimed", id)
	}
	// Payloads that are not "<id>:<fence>" are logged and dropped.
	for _, bad := range []string{fmt.Sprint(id), "x:1", fmt.Sprintf("%d:y", id)} {
		if _, err := db.Pool.Exec(ctx, `SELECT pg_notify('jobfence_cancel', $1)`, bad); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Cancel(ctx, id); err != nil {
		t.Fatal(err)
	}
	select {
	case got := <-cancelled:
		if got != running.Lease() {
			t.Fatalf("cancel notification for %+v, want the running claim %+v", got, running.Lease())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no cancel notification")
	}
}

// TestFinishBatchSurvivesBadInput: one outcome's NUL-laden error text does
// not fail the other outcomes of its batch, and an invalid outcome is
// refused before anything is applied.
func TestFinishBatchSurvivesBadInput(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	for range 2 {
		if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	jobs := claim(t, c, "default", 2, time.Minute)
	if _, err := c.Finish(ctx, []queue.Finish{{Lease: jobs[0].Lease(), Outcome: queue.Outcome(0)}}); err == nil ||
		!strings.Contains(err.Error(), "invalid outcome 0") {
		t.Fatalf("invalid outcome: %v", err)
	}
	stale, err := c.Finish(ctx, []queue.Finish{
		{Lease: jobs[0].Lease(), Outcome: queue.OutcomeComplete},
		{Lease: jobs[1].Lease(), Outcome: queue.OutcomeRetry, Delay: time.Hour,
			Error: &queue.AttemptError{Attempt: 1, At: time.Now(), Error: "bad input \x00 from upstream"}},
	})
	if err != nil || len(stale) != 0 {
		t.Fatalf("finish: stale=%v err=%v", stale, err)
	}
	done, _ := c.Get(ctx, jobs[0].ID)
	retried, _ := c.Get(ctx, jobs[1].ID)
	if done.State != queue.StateCompleted || retried.State != queue.StateRetryable ||
		retried.Errors[0].Error != "bad input \uFFFD from upstream" {
		t.Fatalf("after finish: %s, %s %+v", done.State, retried.State, retried.Errors)
	}
}

// TestEnqueueManyTakesTheDatabasesClock: jobs to run now are ready from the
// database's now(), not the host's: a host clock running ahead would
// otherwise delay them by its skew. Inside a transaction now() stands still
// at its start, so a host time written instead shows up as later.
func TestEnqueueManyTakesTheDatabasesClock(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var dbNow time.Time
	if err := tx.QueryRow(ctx, "SELECT now()").Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	ps := []queue.EnqueueParams{{Kind: "plain"}, {Kind: "unique", UniqueKey: "u"}}
	if _, err := c.EnqueueManyTx(ctx, tx, ps); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	rows, err := db.Pool.Query(ctx, "SELECT kind, state, scheduled_at FROM jobfence_jobs ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var kind, state string
		var at time.Time
		if err := rows.Scan(&kind, &state, &at); err != nil {
			t.Fatal(err)
		}
		if state != "available" || !at.Equal(dbNow) {
			t.Errorf("%s job: %s at %v, want available at the database's now() %v", kind, state, at, dbNow)
		}
	}
}

// TestRescueFollowsBackoff: a rescued job waits what the worker's retry
// policy says (by the database's clock), and spends its attempt: the
// database did not restart while it ran. The backoff sees the job as it
// was claimed.
func TestRescueFollowsBackoff(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "charge"}); err != nil {
		t.Fatal(err)
	}
	a := claim(t, c, "default", 1, time.Millisecond)[0]
	time.Sleep(20 * time.Millisecond)
	var seen *queue.Job
	n, err := c.Rescue(ctx, queue.RescueParams{Limit: 10, Backoff: func(j *queue.Job) time.Duration {
		seen = j
		return time.Hour
	}})
	if err != nil || n != 1 || seen == nil || seen.ID != a.ID || seen.Attempt != 1 || seen.Fence != a.Fence {
		t.Fatalf("rescue = %d, %v; backoff saw %+v", n, err, seen)
	}
	var state string
	var attempt int
	var secs float64
	var reason string
	if err := db.Pool.QueryRow(ctx, `SELECT state, attempt, extract(epoch FROM scheduled_at - now()), errors->0->>'error' FROM jobfence_jobs WHERE id = $1`, a.ID).
		Scan(&state, &attempt, &secs, &reason); err != nil {
		t.Fatal(err)
	}
	if state != "retryable" || attempt != 1 || secs < 3500 || secs > 3600 || !strings.Contains(reason, "stopped heartbeating") {
		t.Fatalf("rescued job: %s, attempt %d, ready in %.0fs, error %q; want retryable, attempt 1 spent, in an hour", state, attempt, secs, reason)
	}
}

// TestWakeUpLeavesCommitsDurable: the wake-up after an insert commits
// without waiting for a disk flush, and that setting stays in its own
// transaction: the next transaction on the same connection, and a
// caller's transaction that inserts with EnqueueTx, still commit
// synchronously (a completion or a claim committed asynchronously could be
// lost in a crash after the worker acted on it).
func TestWakeUpLeavesCommitsDurable(t *testing.T) {
	db := pgtest.New(t)
	pool := pgtest.AppPool(t, db, "one-connection", 1)
	c := pgqueue.New(pool, pgqueue.Config{})
	ctx := context.Background()
	show := func(q interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) string {
		t.Helper()
		var v string
		if err := q.QueryRow(ctx, `SHOW synchronous_commit`).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	// The test server is not durable: make this connection's commits
	// durable, as a production server's are.
	if _, err := pool.Exec(ctx, `SET synchronous_commit = on`); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "durable"}); err != nil {
			t.Fatal(err)
		}
		if got := show(pool); got != "on" {
			t.Fatalf("synchronous_commit %q on the connection after an insert's wake-up, want on", got)
		}
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := c.EnqueueTx(ctx, tx, queue.EnqueueParams{Kind: "k", Queue: "durable"}); err != nil {
		t.Fatal(err)
	}
	if got := show(tx); got != "on" {
		t.Fatalf("synchronous_commit %q in the caller's transaction after EnqueueTx, want on", got)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// The wake-up statement itself commits asynchronously.
	tx, err = pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, pgqueue.WakeSQL, "jobfence_test_channel", []string{"durable"}); err != nil {
		t.Fatal(err)
	}
	if got := show(tx); got != "off" {
		t.Fatalf("synchronous_commit %q inside the wake-up's transaction, want off", got)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if got := show(pool); got != "on" {
		t.Fatalf("synchronous_commit %q after the wake-up's transaction, want on", got)
	}
}
