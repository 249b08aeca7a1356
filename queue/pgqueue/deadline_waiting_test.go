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

// waitingDeadline is the deadline of a job that must wait for a limit's
// slot first: long enough for its insert, short enough for a test.
const waitingDeadline = 500 * time.Millisecond

// limitedBehind holds the only slot of limit l (its queue's) with a job
// claimed for a minute, then inserts a job whose deadline comes after
// waitingDeadline and one with none, both limited behind the holder. It
// returns the holder and the two jobs' IDs.
func limitedBehind(t *testing.T, c *pgqueue.Client, l pgqueue.Limit) (holder *queue.Job, late, next int64) {
	t.Helper()
	ctx := context.Background()
	setLimit(t, c, l)
	enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: l.Queue, LimitKey: "p"}, 1)
	got := claim(t, c, l.Queue, 10, time.Minute)
	if len(got) != 1 {
		t.Fatalf("%s: claimed %d jobs, want the slot's holder", l.Queue, len(got))
	}
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: l.Queue, LimitKey: "p", Deadline: time.Now().Add(waitingDeadline)})
	if err != nil {
		t.Fatal(err)
	}
	next = enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: l.Queue, LimitKey: "p"}, 1)[0]
	for _, id := range []int64{res.ID, next} {
		if st := stateOf(t, c, id); st != queue.StateLimited {
			t.Fatalf("%s: job %d is %s behind the slot's holder, want limited", l.Queue, id, st)
		}
	}
	return got[0], res.ID, next
}

// requireDiscardedUnrun fails t unless job id is discarded with the
// deadline's reason last and was never attempted.
func requireDiscardedUnrun(t *testing.T, c *pgqueue.Client, id int64) {
	t.Helper()
	j, err := c.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	var last string
	if len(j.Errors) > 0 {
		last = j.Errors[len(j.Errors)-1].Error
	}
	if j.State != queue.StateDiscarded || j.Attempt != 0 || !strings.HasPrefix(last, deadlineReason+": not started by ") {
		t.Fatalf("job %d past its deadline: %s, attempt %d, last error %q; want discarded unrun with the deadline's reason",
			id, j.State, j.Attempt, last)
	}
}

// jobIDs returns the IDs of jobs.
func jobIDs(jobs []*queue.Job) []int64 {
	ids := make([]int64, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	return ids
}

// TestDeadlineDiscardsALimitedJob: a job whose deadline passes while it
// waits for the slot of a limit of 1 is discarded by the promoter with the
// reason, and never runs once the slot frees: the slot goes to the job
// behind it. Its discard frees nothing (a limited job holds no slot): the
// holder keeps the slot until it completes, and under FailureHalt, where
// a discarded job that held a slot keeps it, the partition goes on.
func TestDeadlineDiscardsALimitedJob(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	const q = "dl-limited"
	holder, late, next := limitedBehind(t, c, pgqueue.Limit{Name: q, Queue: q, PartitionBy: []string{"p"}, Concurrency: 1, OnFailure: pgqueue.FailureHalt})
	time.Sleep(waitingDeadline + 50*time.Millisecond)
	if _, err := c.Promote(ctx, 100); err != nil {
		t.Fatal(err)
	}
	requireDiscardedUnrun(t, c, late)
	if _, err := c.GrantWaiting(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, c, q, 10, time.Minute); len(got) != 0 {
		t.Fatalf("claimed jobs %v while the holder runs: the discard freed a slot", jobIDs(got))
	}
	var holders []int64
	if err := db.Pool.QueryRow(ctx, `SELECT coalesce(array_agg(job_id ORDER BY slot), '{}') FROM jobfence_limit_slots
		WHERE name = $1 AND kind = 0`, q).Scan(&holders); err != nil {
		t.Fatal(err)
	}
	if len(holders) != 1 || holders[0] != holder.ID {
		t.Fatalf("slots name jobs %v, want the holder %d alone", holders, holder.ID)
	}
	finishHeld(t, c, holder)
	got := claim(t, c, q, 10, time.Minute)
	if len(got) != 1 || got[0].ID != next {
		t.Fatalf("once the slot freed claimed jobs %v, want job %d", jobIDs(got), next)
	}
	requireDiscardedUnrun(t, c, late)
}

// TestDeadlineGrantsPassOverALateJob: a limited job whose deadline has
// passed gets no slot, by any path that hands one: a completion's grant
// (the concurrency grant, and the general one for a limit with a rate),
// a completion's hand-over that claims the next job for its worker, and
// a sequence's, which takes its oldest job only. The slot goes to the job
// behind it, which a FailureHalt limit would otherwise halt behind the
// late job's discard; the late job waits, unrun, for the promoter.
func TestDeadlineGrantsPassOverALateJob(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	type route struct {
		name  string
		limit pgqueue.Limit
		// handOver: the holder's completion claims the next job.
		handOver bool
	}
	routes := []route{
		{name: "dl-grant", limit: pgqueue.Limit{Concurrency: 1}},
		{name: "dl-rate", limit: pgqueue.Limit{Concurrency: 1, Rate: 100, Period: time.Minute}},
		{name: "dl-handover", limit: pgqueue.Limit{Concurrency: 1}, handOver: true},
		{name: "dl-sequence", limit: pgqueue.Limit{Sequence: true}},
		{name: "dl-sequence-handover", limit: pgqueue.Limit{Sequence: true}, handOver: true},
	}
	type waiting struct {
		holder     *queue.Job
		late, next int64
	}
	ws := make([]waiting, len(routes))
	for i, r := range routes {
		l := r.limit
		l.Name, l.Queue, l.PartitionBy, l.OnFailure = r.name, r.name, []string{"p"}, pgqueue.FailureHalt
		ws[i].holder, ws[i].late, ws[i].next = limitedBehind(t, c, l)
	}
	time.Sleep(waitingDeadline + 50*time.Millisecond)
	for i, r := range routes {
		t.Run(r.name, func(t *testing.T) {
			w := ws[i]
			var got []*queue.Job
			if r.handOver {
				got = finishClaim(t, c, "w", time.Minute, []*queue.Job{w.holder}, map[int64]bool{w.holder.ID: true})
			} else {
				if err := c.Complete(ctx, w.holder.Lease()); err != nil {
					t.Fatal(err)
				}
				got = claim(t, c, r.name, 10, time.Minute)
			}
			if len(got) != 1 || got[0].ID != w.next {
				t.Fatalf("the holder's slot went to jobs %v, want job %d, not the late job %d", jobIDs(got), w.next, w.late)
			}
			if st := stateOf(t, c, w.late); st != queue.StateLimited {
				t.Fatalf("the late job is %s, want limited until the promoter discards it", st)
			}
		})
	}
	if _, err := c.Promote(ctx, 100); err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		requireDiscardedUnrun(t, c, w.late)
	}
}

// TestDeadlineDiscardsAPendingTask: a workflow task whose deadline passes
// while it waits for its dependencies is discarded by the promoter with
// the reason, its dependents cancelled or, marked RunAnyway, run; a task
// with none is discarded by the promoter's own statement. Its dependency
// completing later neither revives it nor counts twice for a dependent
// that waits for both.
func TestDeadlineDiscardsAPendingTask(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	const q = "dl-pending"
	late := task("late", q, "dep")
	late.Params.Deadline = time.Now().Add(-time.Second)
	leaf := task("leaf", q, "dep")
	leaf.Params.Deadline = time.Now().Add(-time.Second)
	after := task("after", q, "late")
	after.RunAnyway = true
	both := task("both", q, "dep", "late")
	both.RunAnyway = true
	res, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "dl", Tasks: []queue.WorkflowTask{
		task("dep", q), late, task("cancelled", q, "late"), after, both, leaf,
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Promote(ctx, 100); err != nil {
		t.Fatal(err)
	}
	want := map[string]queue.State{"dep": "available", "late": "discarded", "cancelled": "cancelled",
		"after": "available", "both": "pending", "leaf": "discarded"}
	if got := states(t, c, res.ID); !equalStates(got, want) {
		t.Fatalf("after the promoter: states = %v, want %v", got, want)
	}
	requireDiscardedUnrun(t, c, res.Tasks["late"])
	requireDiscardedUnrun(t, c, res.Tasks["leaf"])
	requireCancelledBy(t, c, res.ID, "cancelled", "late")
	dep := claim(t, c, q, 1, time.Minute)
	if len(dep) != 1 || dep[0].ID != res.Tasks["dep"] {
		t.Fatalf("claimed jobs %v, want the dependency %d", jobIDs(dep), res.Tasks["dep"])
	}
	finish(t, c, queue.Finish{Lease: dep[0].Lease(), Outcome: queue.OutcomeComplete, Workflow: true})
	want["dep"], want["both"] = "completed", "available"
	if got := states(t, c, res.ID); !equalStates(got, want) {
		t.Fatalf("after the dependency completed: states = %v, want %v", got, want)
	}
	requireDiscardedUnrun(t, c, res.Tasks["late"])
}

// TestDeadlineSweepReadsItsIndex: the predicate of the sweep's index,
// jobfence_jobs_deadline_waiting, holds the states the state machine
// sweeps (queue.StateRule.Deadline), no more and no fewer; and the
// promoter's statements, planned as PgBouncer runs them (custom plans)
// and as a prepared statement's generic plan, on a table of many jobs
// without a deadline, reach the jobs past their deadline through it and
// never scan the table, so a sweep with nothing to discard costs an index
// probe.
func TestDeadlineSweepReadsItsIndex(t *testing.T) {
	c, db := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var def string
	if err := db.Pool.QueryRow(ctx, `SELECT coalesce(pg_get_indexdef(to_regclass('jobfence_jobs_deadline_waiting')), '')`).Scan(&def); err != nil {
		t.Fatal(err)
	}
	for _, r := range queue.StateRules() {
		if in := strings.Contains(def, "'"+string(r.State)+"'::text"); in != r.Deadline {
			t.Errorf("state %s: in the index's predicate %v, swept by the state machine %v; the index is %q", r.State, in, r.Deadline, def)
		}
	}
	ps := make([]queue.EnqueueParams, 5000)
	for i := range ps {
		ps[i] = queue.EnqueueParams{Kind: "k"}
	}
	if _, err := c.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, "ANALYZE jobfence_jobs"); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct{ name, sql string }{{"promote", pgqueue.PromoteSQL}, {"late tasks", pgqueue.LateTasksSQL}} {
		for _, mode := range []string{"auto", "force_generic_plan"} {
			t.Run(tt.name+" "+mode, func(t *testing.T) {
				explainDeadlineSweep(t, ctx, db, mode, tt.sql)
			})
		}
	}
}

// explainDeadlineSweep fails t unless sql, planned with plan_cache_mode
// mode, reads jobfence_jobs_deadline_waiting and never scans the jobs
// table whole.
func explainDeadlineSweep(t *testing.T, ctx context.Context, db *pgtest.DB, mode, sql string) {
	t.Helper()
	tx := planTx(t, ctx, db.Pool, mode)
	defer tx.Rollback(ctx)
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, 1000).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var probed bool
	var scans []string
	parsePlan(t, raw).walk(func(p planNode) {
		if p.Relation != "jobfence_jobs" || p.Type == "ModifyTable" {
			return
		}
		scans = append(scans, p.Type+" "+p.Index)
		probed = probed || p.Index == "jobfence_jobs_deadline_waiting"
		if p.Type == "Seq Scan" {
			t.Errorf("plan_cache_mode %s: the jobs table is scanned whole", mode)
		}
	})
	if !probed || t.Failed() {
		t.Fatalf("plan_cache_mode %s: the jobs table is read by %q, want jobfence_jobs_deadline_waiting among them and no Seq Scan; plan:\n%s",
			mode, scans, raw)
	}
}
