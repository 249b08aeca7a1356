package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// insertTasks inserts a workflow created at ago before now with n tasks of
// queue q in state.
func insertTasks(t *testing.T, db *pgtest.DB, q string, state queue.State, n int, ago time.Duration) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `
WITH w AS (
    INSERT INTO jobfence_workflows (id, name, created_at)
    VALUES (md5(random()::text)::uuid, 'w', now() - $4::bigint * interval '1 microsecond') RETURNING id
)
INSERT INTO jobfence_jobs (queue, kind, state, scheduled_at, workflow_id, task_name, deps_left)
SELECT $1, 'k', $2, now(), w.id, 't' || i, CASE WHEN $2 = 'pending' THEN 1 END
FROM w, generate_series(1, $3) AS i`, q, string(state), n, ago.Microseconds())
	if err != nil {
		t.Fatal(err)
	}
}

// insertLimited inserts n jobs of queue q held back by limit name.
func insertLimited(t *testing.T, db *pgtest.DB, q, name string, n int) {
	t.Helper()
	_, err := db.Pool.Exec(context.Background(), `
INSERT INTO jobfence_jobs (queue, kind, state, scheduled_at, limit_name, limit_part)
SELECT $1, 'k', 'limited', now(), $2, '' FROM generate_series(1, $3)`, q, name, n)
	if err != nil {
		t.Fatal(err)
	}
}

// TestQueuesCountLimitedPending: a queue's limited jobs and pending
// workflow tasks are counted (143 emails waiting on a limit must not look
// idle), exactly under the cap; beyond it, limited jobs are counted from
// the first CountCap by limit and pending tasks among the newest
// workflows' tasks, as lower bounds, "?" for a queue not reached.
func TestQueuesCountLimitedPending(t *testing.T) {
	ctx := context.Background()
	n := func(n int64) pgqueue.Count { return pgqueue.Count{N: n} }
	atLeast := func(n int64) pgqueue.Count { return pgqueue.Count{N: n, AtLeast: true} }
	count := func(t *testing.T, c *pgqueue.Client) map[string]pgqueue.QueueInfo {
		t.Helper()
		qs, err := c.Queues(ctx)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]pgqueue.QueueInfo{}
		for _, q := range qs {
			got[q.Name] = q
		}
		return got
	}
	t.Run("under the cap", func(t *testing.T) {
		db := pgtest.New(t)
		c := pgqueue.New(db.Pool, pgqueue.Config{CountCap: 10})
		insertLimited(t, db, "email", "smtp", 4)
		insertLimited(t, db, "email", "other", 1)
		insertLimited(t, db, "sms", "smtp", 2)
		insertTasks(t, db, "flow", queue.StatePending, 3, time.Minute)
		insertTasks(t, db, "flow", queue.StateCompleted, 2, time.Hour)
		insertTasks(t, db, "sms", queue.StatePending, 1, time.Hour)
		got := count(t, c)
		for name, want := range map[string]map[queue.State]pgqueue.Count{
			"email": {queue.StateLimited: n(5), queue.StatePending: n(0)},
			"sms":   {queue.StateLimited: n(2), queue.StatePending: n(1)},
			"flow":  {queue.StateLimited: n(0), queue.StatePending: n(3)},
		} {
			for st, c := range want {
				if got[name].Count(st) != c {
					t.Errorf("%s: %s = %v, want %v", name, st, got[name].Count(st), c)
				}
			}
		}
	})
	t.Run("over the cap", func(t *testing.T) {
		db := pgtest.New(t)
		c := pgqueue.New(db.Pool, pgqueue.Config{CountCap: 3})
		insertLimited(t, db, "email", "a", 4)
		insertLimited(t, db, "sms", "b", 1)
		// Listed for its available job; its limited one is not reached.
		insertJobs(t, db, 1, "sms", queue.StateAvailable, 1, time.Minute)
		// The newest workflows come first: flow's tasks fill the sample,
		// and old's, in an older workflow, are not reached.
		insertTasks(t, db, "old", queue.StatePending, 1, time.Hour)
		insertTasks(t, db, "flow", queue.StatePending, 4, time.Minute)
		got := count(t, c)
		for name, want := range map[string]map[queue.State]pgqueue.Count{
			"email": {queue.StateLimited: atLeast(3), queue.StatePending: atLeast(0)},
			"sms":   {queue.StateLimited: atLeast(0), queue.StatePending: atLeast(0)},
			"flow":  {queue.StateLimited: atLeast(0), queue.StatePending: atLeast(3)},
		} {
			for st, c := range want {
				if got[name].Count(st) != c {
					t.Errorf("%s: %s = %v, want %v", name, st, got[name].Count(st), c)
				}
			}
		}
	})
}

// TestQueuesPlanReadsSamplesOnly EXPLAINs (ANALYZE) Queues' statement
// beside 20,000 limited jobs and 2,000 workflows of 10 tasks, all but the
// newest workflow's completed: counting limited jobs, pending tasks and
// the newest finished jobs reads a cap of index entries and rows from each
// index it uses, not the 40,000 jobs there are, and no table is scanned
// whole.
func TestQueuesPlanReadsSamplesOnly(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	insertLimited(t, db, "email", "smtp", 20_000)
	if _, err := db.Pool.Exec(ctx, `
WITH w AS (
    INSERT INTO jobfence_workflows (id, name, created_at)
    SELECT md5(i::text)::uuid, 'w', now() - i * interval '1 second' FROM generate_series(1, 2000) AS i RETURNING id, created_at
)
INSERT INTO jobfence_jobs (queue, kind, state, scheduled_at, finalized_at, workflow_id, task_name, deps_left)
SELECT 'flow', 'k', CASE WHEN w.created_at > now() - interval '1.5 second' THEN 'pending' ELSE 'completed' END, now(),
       CASE WHEN w.created_at > now() - interval '1.5 second' THEN NULL ELSE now() END,
       w.id, 't' || i, CASE WHEN w.created_at > now() - interval '1.5 second' THEN 1 END
FROM w, generate_series(1, 10) AS i`); err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"jobfence_jobs", "jobfence_workflows"} {
		if _, err := db.Pool.Exec(ctx, "VACUUM ANALYZE "+table); err != nil {
			t.Fatal(err)
		}
	}
	const limit = 100
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, pgqueue.QueuesSettingsSQL); err != nil {
		t.Fatal(err)
	}
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) "+pgqueue.QueuesStatement(limit)).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	// The samples of limited jobs and of tasks: the limited jobs' index,
	// the newest workflows, their tasks' names and the tasks by ID; and
	// the newest finished jobs, which the completed tasks kept in
	// jobfence_jobs are (their sample once sorted all 19,990 of them).
	read := map[string]float64{}
	parsePlan(t, raw).walk(func(p planNode) {
		if p.Type == "Seq Scan" && p.Loops > 0 && p.Relation != "jobfence_queues" {
			t.Errorf("%s is read by a Seq Scan", p.Relation)
		}
		switch p.Index {
		case "jobfence_jobs_limited", "jobfence_workflows_created", "jobfence_workflow_tasks_pkey", "jobfence_jobs_pkey",
			"jobfence_jobs_finalized":
			read[p.Index] += (p.Rows + p.Removed + p.RemovedJoin) * p.Loops
		}
	})
	if len(read) != 5 {
		t.Errorf("the samples read %v, want the limited jobs, workflows, tasks' names, tasks and finished jobs; plan:\n%s", read, raw)
	}
	for index, n := range read {
		if n > limit+1 {
			t.Errorf("%s: %v rows read, want at most %d; plan:\n%s", index, n, limit+1, raw)
		}
	}
	if _, err := tx.Exec(ctx, "ROLLBACK"); err != nil {
		t.Fatal(err)
	}
	c := pgqueue.New(db.Pool, pgqueue.Config{CountCap: limit})
	qs, err := c.Queues(ctx)
	if err != nil || len(qs) != 2 {
		t.Fatalf("Queues = %+v, %v; want email and flow", qs, err)
	}
	if got := qs[0].Count(queue.StateLimited); got != (pgqueue.Count{N: limit, AtLeast: true}) {
		t.Errorf("email: limited = %v, want %d+", got, limit)
	}
	// The newest workflow's 10 pending tasks come first in the sample.
	if got := qs[1].Count(queue.StatePending); got.N < 10 || !got.AtLeast {
		t.Errorf("flow: pending = %v, want at least 10, a lower bound", got)
	}
}
