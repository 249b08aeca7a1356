package pgqueue_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestReadyJobsNotifyAfterTheirCommit: the jobs that a completion's
// release, a release of a fan-out's range, a failure's cascade and a
// promotion make available wake the workers of other processes (a
// LISTEN of a session of its own), and every such job is visible,
// available, when its wake-up arrives. The statements that make them
// available send no NOTIFY of their own: inside their durable
// transaction it would make the commit wait its turn behind every
// other notifying commit of the server, through their WAL flushes
// (the grants' wake-ups: TestLimitedEnqueueWakesAtItsGrant).
func TestReadyJobsNotifyAfterTheirCommit(t *testing.T) {
	t.Run("statements", func(t *testing.T) {
		for name, sql := range map[string]string{
			"grantSQL": pgqueue.GrantSQL, "grantConcurrencySQL": pgqueue.GrantConcurrencySQL, "handOverSQL": pgqueue.HandOverSQL,
			"releaseRangeSQL": pgqueue.ReleaseRangeSQL, "promoteSQL": pgqueue.PromoteSQL,
			"releaseClaimSQL": pgqueue.ReleaseClaimSQL, "releaseRangeClaimSQL": pgqueue.ReleaseRangeClaimSQL,
		} {
			if strings.Contains(sql, "pg_notify") {
				t.Errorf("%s notifies inside its transaction", name)
			}
		}
		// releaseSQL notifies only inside a caller's transaction
		// (FinishTx), given a channel.
		if n := strings.Count(pgqueue.ReleaseSQL, "pg_notify"); n != 1 || !strings.Contains(pgqueue.ReleaseSQL, "CASE WHEN $3 <> '' THEN pg_notify($3,") {
			t.Errorf("releaseSQL notifies %d times, not only when given a channel", n)
		}
	})

	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{ReleaseChunk: 1})
	t.Cleanup(c.Close)
	wakes := pgtest.Listen(t, db.Pool, "jobfence_insert")
	q := func(name string) string { return name + "-" + db.Schema }

	t.Run("completion", func(t *testing.T) {
		res := insertWorkflow(t, c, task("root", q("c-root")), task("child", q("c-child"), "root"))
		root := claimOne(t, c, q("c-root"))
		if stale := finish(t, c, queue.Finish{Lease: root.Lease(), Outcome: queue.OutcomeComplete, Workflow: true}); len(stale) > 0 {
			t.Fatalf("stale: %v", stale)
		}
		wakes.Next(t, freezeWithin, q("c-child"))
		wantState(t, c, res.Tasks["child"], queue.StateAvailable)
	})

	t.Run("failure runs a dependent anyway", func(t *testing.T) {
		anyway := task("child", q("f-child"), "root")
		anyway.RunAnyway = true
		res := insertWorkflow(t, c, task("root", q("f-root")), anyway)
		root := claimOne(t, c, q("f-root"))
		if stale := finish(t, c, queue.Finish{Lease: root.Lease(), Outcome: queue.OutcomeDiscard, Error: &queue.AttemptError{Attempt: 1, Error: "refused"}, Workflow: true}); len(stale) > 0 {
			t.Fatalf("stale: %v", stale)
		}
		wakes.Next(t, freezeWithin, q("f-child"))
		wantState(t, c, res.Tasks["child"], queue.StateAvailable)
	})

	t.Run("range", func(t *testing.T) {
		// A chunk of 1: the completion releases the first of the three,
		// and records the other two as ranges, released after its
		// commit.
		res := insertWorkflow(t, c, task("root", q("r-root")),
			task("a", q("r-fan"), "root"), task("b", q("r-fan"), "root"), task("c", q("r-fan"), "root"))
		root := claimOne(t, c, q("r-root"))
		completeTaskInTx(t, c, db, root)
		// The caller's transaction notifies for the first itself.
		wakes.Next(t, freezeWithin, q("r-fan"))
		if n, err := c.ReleaseDependents(ctx, []int64{root.ID}); err != nil || n != 2 {
			t.Fatalf("released %d ranges (%v), want 2", n, err)
		}
		wakes.Next(t, freezeWithin, q("r-fan"))
		for _, name := range []string{"a", "b", "c"} {
			wantState(t, c, res.Tasks[name], queue.StateAvailable)
		}
	})

	t.Run("promotion", func(t *testing.T) {
		id := enqueueN(t, c, queue.EnqueueParams{Queue: q("p"), Kind: "k", ScheduledAt: time.Now().Add(100 * time.Millisecond)}, 1)[0]
		deadline := time.Now().Add(30 * time.Second)
		for {
			n, err := c.Promote(ctx, 10)
			if err != nil {
				t.Fatal(err)
			}
			if n[q("p")] == 1 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the job was not due 30 s after its time")
			}
			time.Sleep(20 * time.Millisecond)
		}
		wakes.Next(t, freezeWithin, q("p"))
		wantState(t, c, id, queue.StateAvailable)
	})
}

// insertWorkflow inserts a new workflow of tasks.
func insertWorkflow(t *testing.T, c *pgqueue.Client, tasks ...queue.WorkflowTask) queue.WorkflowResult {
	t.Helper()
	res, err := c.InsertWorkflow(context.Background(), queue.WorkflowParams{Name: t.Name(), Tasks: tasks})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// wantState fails t unless job id is in state want.
func wantState(t *testing.T, c *pgqueue.Client, id int64, want queue.State) {
	t.Helper()
	if got := stateOf(t, c, id); got != want {
		t.Fatalf("job %d is %s, want %s", id, got, want)
	}
}
