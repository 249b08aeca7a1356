package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/sqlfreeze"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/internal/txbound"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// The tests of this file freeze one instance (its client stops, as under
// SIGSTOP or in a paused VM, while its connections stay open) in the
// middle of an operation, and show that what it was doing does not stay
// locked: another instance does the work at once, or once the frozen
// instance's transaction has been ended by its bound.

// freezeWithin bounds how long an operation takes to reach its freeze
// point, and how long a check waits on a single statement's outcome.
const freezeWithin = 30 * time.Second

// frozenClient returns a second instance on db's schema whose client a
// test can freeze.
func frozenClient(t *testing.T, db *pgtest.DB) (*pgqueue.Client, *sqlfreeze.Freezer) {
	t.Helper()
	fz := sqlfreeze.New(t, db.URL, 4)
	return pgqueue.New(fz.Pool, pgqueue.Config{Logger: slog.New(slog.DiscardHandler)}), fz
}

// expiredJob enqueues a job in queue q and claims it with a lease that has
// run out by the time it returns.
func expiredJob(t *testing.T, c *pgqueue.Client, q string) *queue.Job {
	t.Helper()
	if _, err := c.Enqueue(context.Background(), queue.EnqueueParams{Queue: q, Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	jobs := claim(t, c, q, 1, time.Millisecond)
	if len(jobs) != 1 {
		t.Fatalf("claimed %d jobs, want 1", len(jobs))
	}
	time.Sleep(20 * time.Millisecond)
	return jobs[0]
}

func mentions(s string) func(string) bool {
	return func(sql string) bool { return strings.Contains(sql, s) }
}

// TestFrozenRescuerHoldsNoJobs: a rescuer frozen after its first statement
// on the jobs table leaves the expired job to the next rescuer, which
// moves it at once; woken, the frozen one moves nothing more. Before the
// fix the first statement locked the expired jobs (SELECT ... FOR UPDATE
// SKIP LOCKED in a transaction): every other rescuer skipped them, and
// they stayed running, their leases long gone, for as long as the freeze
// lasted.
func TestFrozenRescuerHoldsNoJobs(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	job := expiredJob(t, c, "default")
	a, fz := frozenClient(t, db)
	fz.Arm(sqlfreeze.Point{Match: mentions("jobfence_jobs")})
	type result struct {
		n   int
		err error
	}
	done := make(chan result, 1)
	go func() {
		n, err := a.Rescue(ctx, queue.RescueParams{Limit: 10})
		done <- result{n, err}
	}()
	fz.Frozen(t, freezeWithin)

	if n, err := c.Rescue(ctx, queue.RescueParams{Limit: 10}); err != nil || n != 1 {
		t.Fatalf("another rescuer, while the first is frozen mid-rescue: rescued %d, %v; want the expired job", n, err)
	}
	fz.Thaw()
	if r := <-done; r.err != nil || r.n != 0 {
		t.Fatalf("the woken rescuer rescued %d, %v; want nothing (the job was rescued already)", r.n, r.err)
	}
	j, err := c.Get(ctx, job.ID)
	if err != nil || j.State != queue.StateRetryable || len(j.Errors) != 1 {
		t.Fatalf("job after both rescues: %+v, %v; want retryable, rescued once", j, err)
	}
}

// eventually fails t unless cond holds within a few seconds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwatch.WaitFor(t, 5*time.Second, what, cond)
}

// listen returns a function that waits up to freezeWithin for a
// notification on channel whose payload is want. NOTIFY is per database,
// so notifications of other tests' schemas are skipped.
func listen(t *testing.T, pool *pgxpool.Pool, channel string) func(want string) bool {
	t.Helper()
	conn, err := pool.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Release)
	if _, err := conn.Exec(context.Background(), "LISTEN "+channel); err != nil {
		t.Fatal(err)
	}
	return func(want string) bool {
		ctx, cancel := context.WithTimeout(context.Background(), freezeWithin)
		defer cancel()
		for {
			n, err := conn.Conn().WaitForNotification(ctx)
			if err != nil {
				return false
			}
			if n.Payload == want {
				return true
			}
		}
	}
}

// TestFrozenAfterOneStatement: each of these operations is one statement
// in a transaction of its own. Its client frozen right after sending it
// (its reply held), the statement still commits, and nothing of it stays
// locked: the server's backend is idle, and another instance sees the
// work done and can go on from it. Cancel and Retry were two statements
// before the fix: Cancel in a transaction (the frozen client held the
// cancelled job's row, and its worker's heartbeat waited on it), Retry in
// two (its wake-up waited for the client to wake).
func TestFrozenAfterOneStatement(t *testing.T) {
	for _, tt := range []struct {
		name string
		// match picks the statement the client freezes after sending.
		match func(string) bool
		// run sets the stage with c and returns the operation a, the
		// frozen instance, runs, and the check on the work it did.
		run func(t *testing.T, c *pgqueue.Client, db *pgtest.DB) (op func(a *pgqueue.Client) error, check func(t *testing.T))
	}{{
		name:  "promote",
		match: mentions("WITH due AS"),
		run: func(t *testing.T, c *pgqueue.Client, db *pgtest.DB) (func(*pgqueue.Client) error, func(*testing.T)) {
			ctx := context.Background()
			res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", ScheduledAt: time.Now().Add(100 * time.Millisecond)})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
			return func(a *pgqueue.Client) error {
					_, err := a.Promote(ctx, 10)
					return err
				}, func(t *testing.T) {
					eventually(t, "the job promoted", func() bool {
						j, err := c.Get(ctx, res.ID)
						return err == nil && j.State == queue.StateAvailable
					})
				}
		},
	}, {
		name:  "prune",
		match: mentions("DELETE FROM jobfence_jobs"),
		run: func(t *testing.T, c *pgqueue.Client, db *pgtest.DB) (func(*pgqueue.Client) error, func(*testing.T)) {
			ctx := context.Background()
			job := expiredJob(t, c, "default")
			if _, err := c.Finish(ctx, []queue.Finish{{Lease: job.Lease(), Outcome: queue.OutcomeDiscard}}); err != nil {
				t.Fatal(err)
			}
			if j, err := c.Get(ctx, job.ID); err != nil || j.State != queue.StateDiscarded {
				t.Fatalf("job %+v, %v; want it discarded", j, err)
			}
			return func(a *pgqueue.Client) error {
					_, err := a.Prune(ctx, 0, 10)
					return err
				}, func(t *testing.T) {
					eventually(t, "the job pruned", func() bool {
						_, err := c.Get(ctx, job.ID)
						return errors.Is(err, queue.ErrJobNotFound)
					})
				}
		},
	}, {
		name:  "rescue",
		match: mentions("UPDATE jobfence_jobs"),
		run: func(t *testing.T, c *pgqueue.Client, db *pgtest.DB) (func(*pgqueue.Client) error, func(*testing.T)) {
			ctx := context.Background()
			job := expiredJob(t, c, "default")
			return func(a *pgqueue.Client) error {
					_, err := a.Rescue(ctx, queue.RescueParams{Limit: 10})
					return err
				}, func(t *testing.T) {
					eventually(t, "the job rescued", func() bool {
						j, err := c.Get(ctx, job.ID)
						return err == nil && j.State == queue.StateRetryable
					})
				}
		},
	}, {
		name:  "cancel",
		match: mentions("UPDATE jobfence_jobs"),
		run: func(t *testing.T, c *pgqueue.Client, db *pgtest.DB) (func(*pgqueue.Client) error, func(*testing.T)) {
			ctx := context.Background()
			if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k"}); err != nil {
				t.Fatal(err)
			}
			job := claim(t, c, "default", 1, time.Minute)[0]
			heard := listen(t, db.Pool, "jobfence_cancel")
			return func(a *pgqueue.Client) error {
					return a.Cancel(ctx, job.ID)
				}, func(t *testing.T) {
					// The worker's heartbeat finds the job gone rather than
					// wait for the canceller's row lock.
					eventually(t, "the worker's heartbeat to find the job cancelled", func() bool {
						hctx, cancel := context.WithTimeout(ctx, 3*time.Second)
						defer cancel()
						lost, err := c.Heartbeat(hctx, []queue.Lease{job.Lease()}, time.Minute)
						if err != nil {
							t.Fatalf("the worker's heartbeat: %v", err)
						}
						return len(lost) == 1
					})
					if !heard(fmt.Sprintf("%d:%d", job.ID, job.Fence)) {
						t.Fatal("no cancel notification while the canceller is frozen")
					}
				}
		},
	}, {
		name:  "retry",
		match: mentions("UPDATE jobfence_jobs"),
		run: func(t *testing.T, c *pgqueue.Client, db *pgtest.DB) (func(*pgqueue.Client) error, func(*testing.T)) {
			ctx := context.Background()
			q := "frozen-retry-" + db.Schema
			res, err := c.Enqueue(ctx, queue.EnqueueParams{Queue: q, Kind: "k"})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.Cancel(ctx, res.ID); err != nil {
				t.Fatal(err)
			}
			heard := listen(t, db.Pool, "jobfence_insert")
			return func(a *pgqueue.Client) error {
					return a.Retry(ctx, res.ID)
				}, func(t *testing.T) {
					if !heard(q) {
						t.Fatal("no wake-up of the retried job's queue while the retrier is frozen")
					}
					if jobs := claim(t, c, q, 1, time.Minute); len(jobs) != 1 || jobs[0].ID != res.ID {
						t.Fatalf("claimed %+v, want the retried job", jobs)
					}
				}
		},
	}} {
		t.Run(tt.name, func(t *testing.T) {
			c, db := newClient(t)
			op, check := tt.run(t, c, db)
			a, fz := frozenClient(t, db)
			fz.Arm(sqlfreeze.Point{Match: tt.match, Sent: true})
			done := make(chan error, 1)
			go func() { done <- op(a) }()
			pid := fz.Frozen(t, freezeWithin)
			// The statement may still be on its way: check polls.
			check(t)
			sqlfreeze.WaitIdle(t, db.Pool, pid, 2*time.Second)
			fz.Thaw()
			if err := <-done; err != nil {
				t.Fatalf("the woken instance's %s: %v", tt.name, err)
			}
		})
	}
}

// TestFrozenEnqueueManyFreesKeys: EnqueueMany's COPY and insert of jobs
// with unique keys (a UniqueKey, UniqueOpts, a debounced UniqueOpts)
// share a transaction. Its client frozen before the commit, the keys it
// inserted are free again once the server has ended the idle transaction
// (txbound.Idle), and another instance's enqueue of the same key, which
// waits for it, goes through; the frozen batch commits nothing. Before the
// fix the transaction was unbounded: the other enqueue waited for as long
// as the freeze lasted.
func TestFrozenEnqueueManyFreesKeys(t *testing.T) {
	for _, tt := range []struct {
		name  string
		match string
		p     queue.EnqueueParams
	}{
		{"UniqueKey", "ON CONFLICT (unique_key)", queue.EnqueueParams{Kind: "keyed", UniqueKey: "k"}},
		{"UniqueOpts", "ON CONFLICT (unique_hash)", queue.EnqueueParams{Kind: "keyed", Unique: &queue.UniqueOpts{}}},
		{"Debounce", "DO UPDATE SET scheduled_at", queue.EnqueueParams{Kind: "keyed", Unique: &queue.UniqueOpts{Debounce: true}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, db := newClient(t)
			ctx := context.Background()
			a, fz := frozenClient(t, db)
			fz.Arm(sqlfreeze.Point{Match: mentions(tt.match)})
			done := make(chan error, 1)
			go func() {
				_, err := a.EnqueueMany(ctx, []queue.EnqueueParams{{Kind: "plain"}, tt.p})
				done <- err
			}()
			fz.Frozen(t, freezeWithin)
			frozen := time.Now()

			bound, cancel := context.WithTimeout(ctx, txbound.Idle+5*time.Second)
			defer cancel()
			res, err := c.Enqueue(bound, tt.p)
			if err != nil || !res.Inserted {
				t.Fatalf("another instance's enqueue of the key, %v after the batch's client froze: %+v, %v; want it inserted",
					time.Since(frozen), res, err)
			}
			t.Logf("the key was free %v after the batch's client froze", time.Since(frozen))
			fz.Thaw()
			if err := <-done; err == nil {
				t.Fatal("the woken batch committed, want its transaction ended")
			}
			if jobs, err := c.List(ctx, pgqueue.ListParams{Kind: "plain"}); err != nil || len(jobs) != 0 {
				t.Fatalf("plain jobs %d, %v; want none (the batch was rolled back)", len(jobs), err)
			}
		})
	}
}

// waitClaim claims from q until it gets a job, and fails t after within.
func waitClaim(t *testing.T, c *pgqueue.Client, q string, within time.Duration) *queue.Job {
	t.Helper()
	var got *queue.Job
	testwatch.WaitFor(t, within, "a claim of the job", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), within)
		defer cancel()
		jobs, err := c.Claim(ctx, queue.ClaimParams{Queue: q, Limit: 1, Lease: time.Minute, WorkerID: t.Name()})
		if err != nil {
			t.Fatal(err)
		}
		if len(jobs) == 1 {
			got = jobs[0]
		}
		return got != nil
	})
	return got
}

// TestFrozenExplainClaimFreesJobs: ExplainClaim runs a claim under EXPLAIN
// ANALYZE and rolls it back. Its client frozen before the rollback, the
// claimed job is free again once the server has ended the idle
// transaction (txbound.Idle), and another instance claims it, while the
// first stays frozen. Before the fix the transaction was unbounded: the
// job stayed locked, skipped by every claim, for as long as the freeze
// lasted.
func TestFrozenExplainClaimFreesJobs(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Queue: "explain", Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	a, fz := frozenClient(t, db)
	fz.Arm(sqlfreeze.Point{Match: mentions("EXPLAIN (ANALYZE")})
	done := make(chan error, 1)
	go func() {
		_, err := a.ExplainClaim(ctx, queue.ClaimParams{Queue: "explain", Limit: 1, Lease: time.Minute, WorkerID: "explain"})
		done <- err
	}()
	fz.Frozen(t, freezeWithin)
	frozen := time.Now()
	if j := waitClaim(t, c, "explain", txbound.Idle+5*time.Second); j.ID != res.ID {
		t.Fatalf("claimed job %d, want %d", j.ID, res.ID)
	}
	t.Logf("the job was claimed %v after the explaining client froze", time.Since(frozen))
	fz.Thaw()
	<-done // its transaction was ended: an error, or a plan if the rollback was all that was left
}

// TestFrozenQueuesReaderEnds: Queues reads in a read-only transaction,
// whose snapshot keeps vacuum from removing what died since and whose
// locks a migration's DDL waits for. Its client frozen before the commit,
// the server ends the transaction within txbound.Idle. Before the fix it
// stayed open for as long as the freeze lasted.
func TestFrozenQueuesReaderEnds(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	a, fz := frozenClient(t, db)
	fz.Arm(sqlfreeze.Point{Match: mentions("jobfence_queues")})
	done := make(chan error, 1)
	go func() {
		_, err := a.Queues(ctx)
		done <- err
	}()
	pid := fz.Frozen(t, freezeWithin)
	sqlfreeze.WaitIdle(t, db.Pool, pid, txbound.Idle+3*time.Second)
	fz.Thaw()
	<-done // its transaction was ended: an error, or the queues if the commit was all that was left
}
