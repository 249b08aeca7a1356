package pgqueue_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// where says which table holds job id: "jobs", "finished" or "" (none).
func where(t *testing.T, pool *pgxpool.Pool, id int64) string {
	t.Helper()
	var jobs, finished int
	if err := pool.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM jobfence_jobs WHERE id = $1),
        (SELECT count(*) FROM jobfence_jobs_finished WHERE id = $1)`, id).Scan(&jobs, &finished); err != nil {
		t.Fatal(err)
	}
	switch {
	case jobs == 1 && finished == 0:
		return "jobs"
	case jobs == 0 && finished == 1:
		return "finished"
	case jobs == 0 && finished == 0:
		return ""
	}
	t.Fatalf("job %d is in both tables (%d, %d)", id, jobs, finished)
	return ""
}

// claimNew enqueues p and claims it.
func claimNew(t *testing.T, c *pgqueue.Client, p queue.EnqueueParams) *queue.Job {
	t.Helper()
	if p.Queue == "" {
		p.Queue = "fin"
	}
	res, err := c.Enqueue(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	jobs := claim(t, c, p.Queue, 1, time.Minute)
	if len(jobs) != 1 || jobs[0].ID != res.ID {
		t.Fatalf("claimed %v, want job %d", jobs, res.ID)
	}
	return jobs[0]
}

// TestDeleteOnComplete: a job inserted with DeleteOnComplete is gone once
// its fenced completion commits, through every insert path (one insert,
// COPY, the keyed batch insert) and every completion path (a batch of
// completions, a mixed batch, a completion in the handler's transaction);
// a job that must stay stored (a unique key) completes in place; a job
// without the option is kept; and a zombie's late completion of a deleted
// job is stale.
func TestDeleteOnComplete(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()

	del := claimNew(t, c, queue.EnqueueParams{Kind: "gone", DeleteOnComplete: true})
	kept := claimNew(t, c, queue.EnqueueParams{Kind: "kept"})
	keyed := claimNew(t, c, queue.EnqueueParams{Kind: "keyed", UniqueKey: "k1", DeleteOnComplete: true})
	stale, err := c.Finish(ctx, []queue.Finish{
		{Lease: del.Lease(), Outcome: queue.OutcomeComplete, Output: []byte(`{"n": 1}`)},
		{Lease: kept.Lease(), Outcome: queue.OutcomeComplete},
		{Lease: keyed.Lease(), Outcome: queue.OutcomeComplete},
	})
	if err != nil || len(stale) != 0 {
		t.Fatalf("finish: stale %v, %v", stale, err)
	}
	if _, err := c.Get(ctx, del.ID); !errors.Is(err, queue.ErrJobNotFound) {
		t.Fatalf("a completed DeleteOnComplete job: Get = %v, want ErrJobNotFound", err)
	}
	for _, j := range []*queue.Job{kept, keyed} {
		got, err := c.Get(ctx, j.ID)
		if err != nil || got.State != queue.StateCompleted {
			t.Fatalf("job %s: %+v, %v; want completed", j.Kind, got, err)
		}
	}
	// The zombie of the deleted job: its completion finds nothing.
	if err := c.Complete(ctx, del.Lease()); !errors.Is(err, queue.ErrStaleFence) {
		t.Fatalf("a late completion of a deleted job: %v, want ErrStaleFence", err)
	}

	// A batch insert: COPY (plain jobs) and the keyed insert (scheduled).
	n, err := c.EnqueueMany(ctx, []queue.EnqueueParams{
		{Kind: "many", Queue: "many", DeleteOnComplete: true},
		{Kind: "many", Queue: "many", ScheduledAt: time.Now().Add(-time.Second), DeleteOnComplete: true},
		{Kind: "many", Queue: "many"},
	})
	if err != nil || n != 3 {
		t.Fatalf("enqueue many: %d, %v", n, err)
	}
	jobs := claim(t, c, "many", 3, time.Minute)
	if len(jobs) != 3 {
		t.Fatalf("claimed %d, want 3", len(jobs))
	}
	// A mixed batch: two completions and a retry (finishSQL).
	fs := []queue.Finish{
		{Lease: jobs[0].Lease(), Outcome: queue.OutcomeComplete},
		{Lease: jobs[1].Lease(), Outcome: queue.OutcomeComplete},
		{Lease: jobs[2].Lease(), Outcome: queue.OutcomeRetry, Error: &queue.AttemptError{Error: "again"}},
	}
	if stale, err := c.Finish(ctx, fs); err != nil || len(stale) != 0 {
		t.Fatalf("finish mixed: stale %v, %v", stale, err)
	}
	var left []string
	rows, err := db.Pool.Query(ctx, `SELECT state FROM jobfence_jobs WHERE queue = 'many' ORDER BY id`)
	if err != nil {
		t.Fatal(err)
	}
	left, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	// Of the three, the one without the option is kept (it retries); the
	// others are gone, whichever two of them got it.
	var withOpt int
	for _, j := range jobs {
		if where(t, db.Pool, j.ID) == "" {
			withOpt++
		}
	}
	if withOpt != 2 || !slices.Equal(left, []string{"retryable"}) {
		t.Fatalf("after the mixed batch: %d deleted, left %v; want 2 deleted and [retryable]", withOpt, left)
	}

	// In the handler's transaction.
	txJob := claimNew(t, c, queue.EnqueueParams{Kind: "tx", DeleteOnComplete: true})
	tx, err := c.BeginTx(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CompleteTx(ctx, tx, txJob.Lease()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := where(t, db.Pool, txJob.ID); got != "" {
		t.Fatalf("a DeleteOnComplete job completed in a transaction is in %q, want gone", got)
	}
}

// TestInsertOptsDeleteOnComplete: the option set on the args type's
// InsertOpts holds for every job of the kind.
func TestInsertOptsDeleteOnComplete(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	res, err := c.Insert(ctx, throwaway{}, &queue.InsertOpts{Queue: "fin"})
	if err != nil {
		t.Fatal(err)
	}
	var stored *bool
	if err := db.Pool.QueryRow(ctx, `SELECT delete_on_complete FROM jobfence_jobs WHERE id = $1`, res.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored == nil || !*stored {
		t.Fatalf("delete_on_complete = %v, want true from the args type", stored)
	}
	j := claim(t, c, "fin", 1, time.Minute)[0]
	if err := c.Complete(ctx, j.Lease()); err != nil {
		t.Fatal(err)
	}
	if got := where(t, db.Pool, j.ID); got != "" {
		t.Fatalf("job in %q after completion, want gone", got)
	}
}

type throwaway struct{}

func (throwaway) Kind() string                 { return "throwaway" }
func (throwaway) InsertOpts() queue.InsertOpts { return queue.InsertOpts{DeleteOnComplete: true} }

// TestCompletedJobsMoveToFinished: once partitions exist, a completion
// moves its job into jobfence_jobs_finished in the same statement (a batch,
// a completion in a transaction), with its output; Get, List, Counts and
// Queues find it there; a zombie's late completion after the move is
// stale; Retry refuses it and RetryForce moves it back with its ID, and
// its next claim has a greater fence; Delete and DeleteMatching remove it;
// a job whose unique key must keep refusing duplicates completes in
// place.
func TestCompletedJobsMoveToFinished(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	j := claimNew(t, c, queue.EnqueueParams{Kind: "before"})
	if err := c.Complete(ctx, j.Lease()); err != nil {
		t.Fatal(err)
	}
	if got := where(t, db.Pool, j.ID); got != "jobs" {
		t.Fatalf("before any partition, a completed job is in %q, want jobs (completed in place)", got)
	}

	res, err := c.MaintainFinished(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if res.Created == 0 || res.Partitions != res.Created || res.Until.Before(time.Now().Add(59*time.Minute)) {
		t.Fatalf("MaintainFinished = %+v, want partitions for an hour ahead", res)
	}

	a := claimNew(t, c, queue.EnqueueParams{Kind: "moved"})
	stale, err := c.Finish(ctx, []queue.Finish{{Lease: a.Lease(), Outcome: queue.OutcomeComplete, Output: []byte(`{"total": 42}`)}})
	if err != nil || len(stale) != 0 {
		t.Fatalf("finish: %v, %v", stale, err)
	}
	if got := where(t, db.Pool, a.ID); got != "finished" {
		t.Fatalf("completed job in %q, want finished", got)
	}
	got, err := c.Get(ctx, a.ID)
	if err != nil || got.State != queue.StateCompleted || string(got.Output) != `{"total": 42}` || got.Fence != a.Fence {
		t.Fatalf("Get = %+v, %v; want completed with its output and fence", got, err)
	}
	if err := c.Complete(ctx, a.Lease()); !errors.Is(err, queue.ErrStaleFence) {
		t.Fatalf("a zombie's late completion after the move: %v, want ErrStaleFence", err)
	}
	if lost, err := c.Heartbeat(ctx, []queue.Lease{a.Lease()}, time.Minute); err != nil || len(lost) != 1 {
		t.Fatalf("a zombie's heartbeat after the move: lost %v, %v; want lost", lost, err)
	}

	// In a transaction; a unique key that refuses duplicates in every
	// state, and UniqueOpts with completed among its states, stay.
	b := claimNew(t, c, queue.EnqueueParams{Kind: "moved-tx"})
	tx, err := c.BeginTx(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.CompleteTx(ctx, tx, b.Lease()); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	keyed := claimNew(t, c, queue.EnqueueParams{Kind: "keyed", UniqueKey: "cron:x:1"})
	held := claimNew(t, c, queue.EnqueueParams{Kind: "held", Unique: &queue.UniqueOpts{
		ByArgs: true, ByState: append(queue.UniqueUnfinished(), queue.StateCompleted)}})
	free := claimNew(t, c, queue.EnqueueParams{Kind: "free", Unique: &queue.UniqueOpts{ByArgs: true}})
	for _, j := range []*queue.Job{keyed, held, free} {
		if err := c.Complete(ctx, j.Lease()); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[int64]string{b.ID: "finished", keyed.ID: "jobs", held.ID: "jobs", free.ID: "finished"} {
		if got := where(t, db.Pool, id); got != want {
			t.Errorf("job %d in %q, want %q", id, got, want)
		}
	}
	if r, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "held", Queue: "fin", Unique: &queue.UniqueOpts{
		ByArgs: true, ByState: append(queue.UniqueUnfinished(), queue.StateCompleted)}}); err != nil || r.Inserted {
		t.Fatalf("a duplicate of a completed job whose key holds when completed: %+v, %v; want refused", r, err)
	}

	// Lists read both tables; a list of another state reads jobs only.
	list, err := c.List(ctx, pgqueue.ListParams{State: queue.StateCompleted, Queue: "fin"})
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for _, l := range list {
		ids = append(ids, l.ID)
	}
	want := []int64{free.ID, held.ID, keyed.ID, b.ID, a.ID, j.ID}
	if !slices.Equal(ids, want) {
		t.Fatalf("completed jobs listed %v, want %v (newest first, both tables)", ids, want)
	}
	if page, err := c.List(ctx, pgqueue.ListParams{Queue: "fin", Before: b.ID, Limit: 1}); err != nil || len(page) != 1 || page[0].ID != a.ID {
		t.Fatalf("the page before job %d: %v, %v; want job %d", b.ID, page, err, a.ID)
	}
	counts, err := c.Counts(ctx, "fin")
	if err != nil || counts[queue.StateCompleted] != 6 {
		t.Fatalf("counts %v, %v; want 6 completed", counts, err)
	}
	qs, err := c.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range qs {
		if q.Name == "fin" && (q.Counts[queue.StateCompleted] != pgqueue.Count{N: 6} || q.Completed5m != pgqueue.Count{N: 6}) {
			t.Fatalf("queue fin: completed %v, in 5 minutes %v; want 6 and 6", q.Counts[queue.StateCompleted], q.Completed5m)
		}
	}

	// Retry refuses a completed job; RetryForce moves it back.
	if err := c.Retry(ctx, a.ID); !errors.Is(err, pgqueue.ErrJobCompleted) {
		t.Fatalf("Retry of a finished job: %v, want ErrJobCompleted", err)
	}
	if err := c.RetryForce(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if got := where(t, db.Pool, a.ID); got != "jobs" {
		t.Fatalf("a retried finished job is in %q, want jobs", got)
	}
	again := claim(t, c, "fin", 1, time.Minute)
	if len(again) != 1 || again[0].ID != a.ID || again[0].Fence <= a.Fence || again[0].Attempt != 2 {
		t.Fatalf("claim after RetryForce: %+v; want job %d, attempt 2, a fence above %d", again, a.ID, a.Fence)
	}
	if err := c.Complete(ctx, a.Lease()); !errors.Is(err, queue.ErrStaleFence) {
		t.Fatalf("the first attempt's completion after the retry: %v, want ErrStaleFence", err)
	}
	if err := c.Complete(ctx, again[0].Lease()); err != nil {
		t.Fatal(err)
	}
	if got := where(t, db.Pool, a.ID); got != "finished" {
		t.Fatalf("completed again, job in %q, want finished", got)
	}

	// Delete, one and matching.
	if err := c.Delete(ctx, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, a.ID); !errors.Is(err, queue.ErrJobNotFound) {
		t.Fatalf("Get after Delete: %v", err)
	}
	n, err := c.DeleteMatching(ctx, pgqueue.BulkParams{Queue: "fin", State: queue.StateCompleted})
	if err != nil || n != 5 {
		t.Fatalf("DeleteMatching completed: %d, %v; want 5 (both tables)", n, err)
	}
}

// TestFinishedTableHasEveryColumn: jobfence_jobs_finished has every column
// of jobfence_jobs, of the same type, and a move copies each (the five a
// completion sets apart): a migration that adds a column to the jobs
// table must add it to the finished table and to finishedColumns.
func TestFinishedTableHasEveryColumn(t *testing.T) {
	_, db := newClient(t)
	cols := func(table string) map[string]string {
		rows, err := db.Pool.Query(context.Background(), `SELECT attname::text, format_type(atttypid, atttypmod) FROM pg_attribute
            WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped`, table)
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		var name, typ string
		if _, err := pgx.ForEachRow(rows, []any{&name, &typ}, func() error { m[name] = typ; return nil }); err != nil {
			t.Fatal(err)
		}
		return m
	}
	jobs, finished := cols("jobfence_jobs"), cols("jobfence_jobs_finished")
	copied := map[string]bool{"state": true, "finalized_at": true, "lease_expires_at": true, "output": true, "run_trace": true}
	for _, c := range strings.Split(pgqueue.FinishedColumns, ",") {
		copied[strings.TrimSpace(c)] = true
	}
	for name, typ := range jobs {
		if finished[name] != typ {
			t.Errorf("column %s %s of jobfence_jobs: jobfence_jobs_finished has %q", name, typ, finished[name])
		}
		if !copied[name] {
			t.Errorf("column %s of jobfence_jobs is not in finishedColumns", name)
		}
	}
	if len(finished) != len(jobs) {
		t.Errorf("jobfence_jobs_finished has %d columns, jobfence_jobs %d", len(finished), len(jobs))
	}
}

// dbNow is the database's clock, to the second.
func dbNow(t *testing.T, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	if err := pool.QueryRow(context.Background(), `SELECT date_trunc('second', now())`).Scan(&now); err != nil {
		t.Fatal(err)
	}
	return now.UTC()
}

// makePartition creates and attaches the finished partition [lo, hi), as
// an instance with another retention (or an older one) would have, and
// puts n completed jobs in it.
func makePartition(t *testing.T, pool *pgxpool.Pool, lo, hi time.Time, n int) string {
	t.Helper()
	ctx := context.Background()
	name := pgqueue.PartitionName(lo, hi)
	for _, q := range []string{
		`CREATE TABLE ` + name + ` (LIKE jobfence_jobs_finished INCLUDING DEFAULTS INCLUDING CONSTRAINTS)`,
		`ALTER TABLE jobfence_jobs_finished ATTACH PARTITION ` + name + ` FOR VALUES FROM ('` + lo.Format(time.RFC3339) + `') TO ('` + hi.Format(time.RFC3339) + `')`,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	if _, err := pool.Exec(ctx, `INSERT INTO jobfence_jobs_finished (id, queue, kind, args, state, priority, scheduled_at, attempt,
            max_attempts, fence, errors, attempted_by, created_at, finalized_at, metadata)
        SELECT nextval(pg_get_serial_sequence('jobfence_jobs', 'id')), 'old', 'old', '{}', 'completed', 1, $1, 1, 1, 1, '[]', '{}', $1, $1, '{}'
        FROM generate_series(1, $2)`, lo, n); err != nil {
		t.Fatal(err)
	}
	return name
}

// exists reports whether table name exists.
func exists(t *testing.T, pool *pgxpool.Pool, name string) bool {
	t.Helper()
	var ok bool
	if err := pool.QueryRow(context.Background(), `SELECT to_regclass($1) IS NOT NULL`, name).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestFinishedRetention: MaintainFinished drops a partition whose every
// job finished more than the retention ago, keeps one that straddles the
// cutoff, makes partitions from the last one on, a sixth of the retention
// each, until an hour ahead at least, and refuses a retention below a
// minute with a clear error. The dropped partition's jobs' attempts' logs
// go with it; the kept one's stay.
func TestFinishedRetention(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	for _, r := range []time.Duration{0, 30 * time.Second} {
		_, err := c.MaintainFinished(ctx, r)
		if !errors.Is(err, queue.ErrRetentionTooShort) || !strings.Contains(err.Error(), "retention "+r.String()) ||
			!strings.Contains(err.Error(), "at least 1m0s") {
			t.Fatalf("MaintainFinished(%s) = %v, want ErrRetentionTooShort naming it", r, err)
		}
	}
	now := dbNow(t, db.Pool)
	old := makePartition(t, db.Pool, now.Add(-3*time.Hour), now.Add(-2*time.Hour), 5)
	edge := makePartition(t, db.Pool, now.Add(-2*time.Hour), now.Add(-time.Hour+time.Minute), 5)
	current := makePartition(t, db.Pool, now.Add(-time.Hour+time.Minute), now.Add(time.Minute), 0)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_attempt_logs (job_id, fence, attempt, records)
        SELECT id, 1, 1, '[]' FROM jobfence_jobs_finished`); err != nil {
		t.Fatal(err)
	}
	res, err := c.MaintainFinished(ctx, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if exists(t, db.Pool, old) || !exists(t, db.Pool, edge) || !exists(t, db.Pool, current) {
		t.Fatalf("after maintenance: old %v, straddling %v, current %v; want only old dropped",
			exists(t, db.Pool, old), exists(t, db.Pool, edge), exists(t, db.Pool, current))
	}
	// Ten-minute partitions from the current one's end until an hour
	// ahead: six.
	if res.Dropped != 1 || res.Created != 6 || res.Partitions != 8 || !res.Until.Equal(now.Add(61*time.Minute)) {
		t.Fatalf("MaintainFinished = %+v; want 1 dropped, 6 created, 8 partitions until %v", res, now.Add(61*time.Minute))
	}
	var lo, hi time.Time
	if err := db.Pool.QueryRow(ctx, `SELECT lo, hi FROM jobfence_finished_bounds`).Scan(&lo, &hi); err != nil {
		t.Fatal(err)
	}
	if !lo.Equal(now.Add(-2*time.Hour)) || !hi.Equal(res.Until) {
		t.Fatalf("bounds [%v, %v), want [%v, %v)", lo, hi, now.Add(-2*time.Hour), res.Until)
	}
	// Nothing more to do.
	if again, err := c.MaintainFinished(ctx, time.Hour); err != nil || again.Created+again.Dropped != 0 {
		t.Fatalf("a second pass: %+v, %v; want nothing done", again, err)
	}
	if n, _ := c.Counts(ctx, "old"); n[queue.StateCompleted] != 5 {
		t.Fatalf("jobs kept in the straddling partition: %v, want 5", n)
	}
	var logs, kept int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE job_id IN (SELECT id FROM `+edge+`))
        FROM jobfence_attempt_logs`).Scan(&logs, &kept); err != nil || logs != 5 || kept != 5 {
		t.Fatalf("attempts' logs left: %d, %d of the kept partition's jobs (%v); want the 5 of the kept partition's jobs", logs, kept, err)
	}
}

// TestStalledMaintenanceKeepsCompleting: once now is past the partitions
// made ahead (every instance's maintenance stalled), a completion keeps
// its job in jobfence_jobs, where the batched pruner deletes it; the next
// maintenance starts partitions at now again.
func TestStalledMaintenanceKeepsCompleting(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	now := dbNow(t, db.Pool)
	until := now.Add(2 * time.Second)
	makePartition(t, db.Pool, now.Add(-time.Hour), until, 0)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_finished_bounds (lo, hi) VALUES ($1, $2)`, now.Add(-time.Hour), until); err != nil {
		t.Fatal(err)
	}
	before := claimNew(t, c, queue.EnqueueParams{Kind: "k"})
	if err := c.Complete(ctx, before.Lease()); err != nil {
		t.Fatal(err)
	}
	if got := where(t, db.Pool, before.ID); got != "finished" {
		t.Fatalf("completed before the end of the partitions: in %q, want finished", got)
	}
	waitFor(t, "the database's clock to pass the partitions", func() bool { return !dbNow(t, db.Pool).Before(until) })
	after := claimNew(t, c, queue.EnqueueParams{Kind: "k"})
	if err := c.Complete(ctx, after.Lease()); err != nil {
		t.Fatalf("completion past the partitions: %v", err)
	}
	if got := where(t, db.Pool, after.ID); got != "jobs" {
		t.Fatalf("completed past the partitions: in %q, want jobs", got)
	}
	if n, err := c.Prune(ctx, 0, 100); err != nil || n != 1 {
		t.Fatalf("prune: %d, %v; want the job completed in place", n, err)
	}
	res, err := c.MaintainFinished(ctx, time.Hour)
	if err != nil || res.Created == 0 || res.Until.Before(until.Add(time.Hour)) {
		t.Fatalf("maintenance after the stall: %+v, %v", res, err)
	}
	last := claimNew(t, c, queue.EnqueueParams{Kind: "k"})
	if err := c.Complete(ctx, last.Lease()); err != nil {
		t.Fatal(err)
	}
	if got := where(t, db.Pool, last.ID); got != "finished" {
		t.Fatalf("completed after maintenance resumed: in %q, want finished", got)
	}
}

// waitFor waits for cond, polling, for a minute at most.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDetachBoundedByAFrozenReader: a session that holds an old partition
// (a reader frozen mid-transaction) makes the maintenance that drops it
// give up within its bound, while completions go on meanwhile; the detach
// it left pending is finished, and the partition dropped, once the reader
// lets go.
func TestDetachBoundedByAFrozenReader(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	now := dbNow(t, db.Pool)
	old := makePartition(t, db.Pool, now.Add(-3*time.Hour), now.Add(-2*time.Hour), 3)
	if _, err := c.MaintainFinished(ctx, 3*time.Hour); err != nil {
		t.Fatal(err)
	}
	reader, err := pgx.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(ctx)
	tx, err := reader.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT count(*) FROM `+old); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := c.MaintainFinished(ctx, time.Hour)
		done <- err
	}()
	completed := 0
	var merr error
	for waiting := true; waiting; {
		select {
		case merr = <-done:
			waiting = false
		default:
			j := claimNew(t, c, queue.EnqueueParams{Kind: "k"})
			if err := c.Complete(ctx, j.Lease()); err != nil {
				t.Fatalf("a completion while maintenance waited: %v", err)
			}
			completed++
		}
	}
	took := time.Since(start)
	if merr == nil || !strings.Contains(merr.Error(), "lock timeout") && !strings.Contains(merr.Error(), "statement timeout") {
		t.Fatalf("maintenance beside a frozen reader: %v, want a lock or statement timeout", merr)
	}
	if took > 45*time.Second || completed == 0 {
		t.Fatalf("maintenance gave up after %v with %d completions meanwhile", took, completed)
	}
	t.Logf("maintenance gave up after %v (%v); %d jobs completed meanwhile", took.Round(time.Millisecond), merr, completed)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.MaintainFinished(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	if exists(t, db.Pool, old) {
		t.Fatalf("partition %s still there after the reader let go", old)
	}
}

// TestRolloverWhileWorkersRun: workers complete jobs across a partition
// boundary while two instances' maintenance runs over and over, dropping
// an old partition and making new ones: every job is completed once,
// none is lost, and both partitions around the boundary got jobs.
func TestRolloverWhileWorkersRun(t *testing.T) {
	_, db := newClient(t)
	ctx := context.Background()
	now := dbNow(t, db.Pool)
	boundary := now.Add(3 * time.Second)
	old := makePartition(t, db.Pool, now.Add(-3*time.Hour), now.Add(-2*time.Hour), 10)
	first := makePartition(t, db.Pool, now.Add(-2*time.Hour), boundary, 0)
	second := makePartition(t, db.Pool, boundary, now.Add(time.Hour), 0)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_finished_bounds (lo, hi) VALUES ($1, $2)`, now.Add(-3*time.Hour), now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	wctx, stop := context.WithCancel(ctx)
	defer stop()
	type result struct {
		completed []int64
		err       error
	}
	results := make(chan result, 4)
	for w := range 3 {
		go func() {
			wc := pgqueue.New(db.NewPool(t, 4), pgqueue.Config{})
			var r result
			defer func() { results <- r }()
			for wctx.Err() == nil {
				if _, err := wc.EnqueueMany(ctx, make3("roll")); err != nil {
					r.err = err
					return
				}
				jobs, err := wc.Claim(ctx, queue.ClaimParams{Queue: "roll", Limit: 3, Lease: time.Minute, WorkerID: string(rune('a' + w))})
				if err != nil {
					r.err = err
					return
				}
				fs := make([]queue.Finish, len(jobs))
				for i, j := range jobs {
					fs[i] = queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete}
				}
				stale, err := wc.Finish(ctx, fs)
				if err != nil || len(stale) > 0 {
					r.err = errors.Join(err, errors.New("stale completions"))
					return
				}
				for _, j := range jobs {
					r.completed = append(r.completed, j.ID)
				}
			}
		}()
	}
	for range 2 {
		go func() {
			mc := pgqueue.New(db.NewPool(t, 2), pgqueue.Config{})
			var r result
			defer func() { results <- r }()
			for wctx.Err() == nil {
				if _, err := mc.MaintainFinished(ctx, time.Hour); err != nil {
					r.err = err
					return
				}
			}
		}()
	}
	count := func(table string) int {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+table).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	waitFor(t, "jobs completed on both sides of the boundary", func() bool {
		return !exists(t, db.Pool, old) && count(first) > 0 && count(second) > 0 && dbNow(t, db.Pool).After(boundary.Add(time.Second))
	})
	stop()
	var completed []int64
	for range 5 {
		r := <-results
		if r.err != nil {
			t.Fatal(r.err)
		}
		completed = append(completed, r.completed...)
	}
	var finished, distinct, left int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT id), (SELECT count(*) FROM jobfence_jobs WHERE state <> 'available')
        FROM jobfence_jobs_finished WHERE queue = 'roll'`).Scan(&finished, &distinct, &left); err != nil {
		t.Fatal(err)
	}
	if finished != len(completed) || distinct != finished || left != 0 {
		t.Fatalf("%d completions; finished table has %d rows (%d distinct), %d jobs left not available", len(completed), finished, distinct, left)
	}
	t.Logf("%d jobs completed; %d in the partition before the boundary, %d after", len(completed), count(first), count(second))
}

func make3(q string) []queue.EnqueueParams {
	return []queue.EnqueueParams{{Kind: "k", Queue: q}, {Kind: "k", Queue: q}, {Kind: "k", Queue: q}}
}
