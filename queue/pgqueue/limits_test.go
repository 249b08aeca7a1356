package pgqueue_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

func setLimit(t *testing.T, c *pgqueue.Client, l pgqueue.Limit) {
	t.Helper()
	if err := c.SetLimit(context.Background(), l); err != nil {
		t.Fatal(err)
	}
}

func enqueueN(t *testing.T, c *pgqueue.Client, p queue.EnqueueParams, n int) []int64 {
	t.Helper()
	var ids []int64
	for range n {
		res, err := c.Enqueue(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	return ids
}

func complete(t *testing.T, c *pgqueue.Client, jobs ...*queue.Job) {
	t.Helper()
	for _, j := range jobs {
		if err := c.Complete(context.Background(), j.Lease()); err != nil {
			t.Fatal(err)
		}
	}
}

func stateOf(t *testing.T, c *pgqueue.Client, id int64) queue.State {
	t.Helper()
	j, err := c.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j.State
}

func TestSetLimitRefusesBadLimits(t *testing.T) {
	c, _ := newClient(t)
	tests := []struct {
		l    pgqueue.Limit
		want string
	}{
		{pgqueue.Limit{Queue: "q", Concurrency: 1}, "pgqueue: invalid limit: Name is empty"},
		{pgqueue.Limit{Name: "n", Concurrency: 1}, "pgqueue: invalid limit: Queue is empty"},
		{pgqueue.Limit{Name: "n", Queue: "q"}, "pgqueue: invalid limit: Concurrency and Rate are both zero: the limit would limit nothing"},
		{pgqueue.Limit{Name: "n", Queue: "q", Rate: 5}, "pgqueue: invalid limit: Period must be positive with a Rate"},
		{pgqueue.Limit{Name: "n", Queue: "q", Concurrency: 1, Period: time.Second}, "pgqueue: invalid limit: Period is set without a Rate"},
		{pgqueue.Limit{Name: "n", Queue: "q", Concurrency: -1}, "pgqueue: invalid limit: Concurrency is negative"},
		{pgqueue.Limit{Name: "n", Queue: "q", Sequence: true, Concurrency: 2}, "pgqueue: invalid limit: Concurrency must be 0 or 1 in a Sequence"},
		{pgqueue.Limit{Name: "n", Queue: "q", Concurrency: 1, PartitionBy: []string{"a.b"}}, `pgqueue: invalid limit: PartitionBy field "a.b" is not a top-level JSON field name`},
		{pgqueue.Limit{Name: "n", Queue: "q", Concurrency: 1, OnFailure: "wait"}, `pgqueue: invalid limit: OnFailure "wait" is not release, hold or halt`},
	}
	for _, tt := range tests {
		err := c.SetLimit(context.Background(), tt.l)
		var ile *pgqueue.InvalidLimitError
		if err == nil || err.Error() != tt.want || !errors.As(err, &ile) {
			t.Errorf("SetLimit(%+v) = %v, want %q", tt.l, err, tt.want)
		}
	}
	if err := c.DeleteLimit(context.Background(), "nope"); !errors.Is(err, pgqueue.ErrLimitNotFound) {
		t.Errorf("DeleteLimit(unknown) = %v, want ErrLimitNotFound", err)
	}
}

// TestConcurrencyLimit: a global limit of 2 lets 2 jobs be claimed however
// many are asked for; a completion hands its slot to the oldest waiting
// job at once, and the limit read back is the one set.
func TestConcurrencyLimit(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	setLimit(t, c, pgqueue.Limit{Name: "provider", Queue: "calls", Concurrency: 2})
	ids := enqueueN(t, c, queue.EnqueueParams{Kind: "call", Queue: "calls"}, 5)
	// An unlimited queue is untouched.
	free := enqueueN(t, c, queue.EnqueueParams{Kind: "call", Queue: "other"}, 3)
	if got := claim(t, c, "other", 10, time.Minute); len(got) != len(free) {
		t.Fatalf("claimed %d of an unlimited queue's %d jobs", len(got), len(free))
	}
	got := claim(t, c, "calls", 10, time.Minute)
	if len(got) != 2 || got[0].ID != ids[0] || got[1].ID != ids[1] {
		t.Fatalf("claimed %v, want the first 2 jobs", got)
	}
	for _, id := range ids[2:] {
		if st := stateOf(t, c, id); st != queue.StateLimited {
			t.Fatalf("job %d is %s, want limited", id, st)
		}
	}
	if more := claim(t, c, "calls", 10, time.Minute); len(more) != 0 {
		t.Fatalf("claimed %d more past the limit", len(more))
	}
	complete(t, c, got[0])
	next := claim(t, c, "calls", 10, time.Minute)
	if len(next) != 1 || next[0].ID != ids[2] {
		t.Fatalf("after a completion claimed %v, want job %d alone", next, ids[2])
	}
	ls, err := c.Limits(ctx)
	if err != nil || len(ls) != 1 || ls[0].Name != "provider" || ls[0].Concurrency != 2 || ls[0].OnFailure != pgqueue.FailureRelease {
		t.Fatalf("Limits = %+v, %v", ls, err)
	}
}

// TestPartitionedLimit: a limit of 1 per customer runs one job of each
// customer at once, partitioned by an args field or by the limit key
// given at insert; a kind's limit overrides its queue's.
func TestPartitionedLimit(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	setLimit(t, c, pgqueue.Limit{Name: "per-customer", Queue: "q", PartitionBy: []string{"customer_id"}, Concurrency: 1})
	setLimit(t, c, pgqueue.Limit{Name: "exports", Queue: "q", Kind: "export", Concurrency: 2})
	for i := range 9 {
		args := fmt.Sprintf(`{"customer_id": %d, "n": %d}`, i%3, i)
		if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "sync", Queue: "q", Args: []byte(args)}); err != nil {
			t.Fatal(err)
		}
	}
	// The limit key wins over the args.
	for range 2 {
		if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "sync", Queue: "q", Args: []byte(`{"customer_id": 0}`), LimitKey: "vip"}); err != nil {
			t.Fatal(err)
		}
	}
	enqueueN(t, c, queue.EnqueueParams{Kind: "export", Queue: "q"}, 3)
	got := claim(t, c, "q", 100, time.Minute)
	byKind := map[string]int{}
	customers := map[string]int{}
	for _, j := range got {
		byKind[j.Kind]++
		if j.Kind == "sync" {
			customers[string(j.EncodedArgs)[:17]]++
		}
	}
	// 3 customers and the vip key: 4 syncs; 2 exports.
	if byKind["sync"] != 4 || byKind["export"] != 2 {
		t.Fatalf("claimed %v, want 4 syncs (one per partition) and 2 exports", byKind)
	}
}

// TestZombieCannotFreeASlot: a holder whose lease expired is rescued and
// its slot goes to the next job; its late completion is refused by the
// fence and frees nothing, so the slot's new holder keeps it.
func TestZombieCannotFreeASlot(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	setLimit(t, c, pgqueue.Limit{Name: "one", Queue: "z", Concurrency: 1})
	ids := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "z"}, 3)
	zombie := claim(t, c, "z", 10, time.Millisecond)
	if len(zombie) != 1 {
		t.Fatalf("claimed %d, want 1", len(zombie))
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		n, err := c.Rescue(ctx, queue.RescueParams{Limit: 10, Backoff: func(*queue.Job) time.Duration { return time.Hour }})
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the expired holder was never rescued")
		}
		time.Sleep(5 * time.Millisecond)
	}
	live := claim(t, c, "z", 10, time.Minute)
	if len(live) != 1 || live[0].ID != ids[1] {
		t.Fatalf("after the rescue claimed %v, want job %d", live, ids[1])
	}
	if err := c.Complete(ctx, zombie[0].Lease()); !errors.Is(err, queue.ErrStaleFence) {
		t.Fatalf("zombie's completion = %v, want ErrStaleFence", err)
	}
	// Naming its partition, as a worker does, sends a grant with it,
	// which finds no free slot.
	stale, err := c.Finish(ctx, []queue.Finish{{Lease: zombie[0].Lease(), Outcome: queue.OutcomeComplete,
		Limit: zombie[0].Limit, LimitPartition: zombie[0].LimitPartition}})
	if err != nil || len(stale) != 1 || zombie[0].Limit != "one" {
		t.Fatalf("zombie's Finish naming limit %q = %v stale, %v; want its lease stale", zombie[0].Limit, stale, err)
	}
	if _, err := c.GrantWaiting(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, c, ids[2]); st != queue.StateLimited {
		t.Fatalf("after the zombie's completion job %d is %s, want limited: the zombie freed the live holder's slot", ids[2], st)
	}
	complete(t, c, live[0])
	if got := claim(t, c, "z", 10, time.Minute); len(got) != 1 || got[0].ID != ids[2] {
		t.Fatalf("after the live holder completed claimed %v, want job %d", got, ids[2])
	}
}

// TestSequence: the jobs of a sequence key run one at a time in insert
// order; a failed job holds its sequence through its retry, and its
// discard lets the next go.
func TestSequence(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	setLimit(t, c, pgqueue.Limit{Name: "orders", Queue: "s", Sequence: true})
	var a, b []int64
	for i := range 3 {
		for _, key := range []string{"A", "B"} {
			res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "step", Queue: "s", Args: []byte(fmt.Sprintf(`{"i": %d}`, i)), LimitKey: key, MaxAttempts: 2})
			if err != nil {
				t.Fatal(err)
			}
			if key == "A" {
				a = append(a, res.ID)
			} else {
				b = append(b, res.ID)
			}
		}
	}
	got := claim(t, c, "s", 10, time.Minute)
	if len(got) != 2 || got[0].ID != a[0] || got[1].ID != b[0] {
		t.Fatalf("claimed %v, want the first job of each sequence", got)
	}
	// A's first job fails: it holds A through its retry.
	failA := queue.Finish{Lease: got[0].Lease(), Outcome: queue.OutcomeRetry, Error: &queue.AttemptError{Error: "boom"}}
	if stale, err := c.Finish(ctx, []queue.Finish{failA}); err != nil || len(stale) != 0 {
		t.Fatalf("fail: %v %v", stale, err)
	}
	complete(t, c, got[1])
	if _, err := c.GrantWaiting(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, c, a[1]); st != queue.StateLimited {
		t.Fatalf("while A's first job retries, A's second is %s, want limited", st)
	}
	// The due retry waits for a grant, which hands A's turn to its oldest
	// job: the retry.
	promoteAndGrant(t, c)
	got = claim(t, c, "s", 10, time.Minute)
	// The grant made A's retry available after B's second: it is claimed
	// second.
	slices.SortFunc(got, func(x, y *queue.Job) int { return cmp.Compare(x.ID, y.ID) })
	if len(got) != 2 || got[0].ID != a[0] || got[1].ID != b[1] {
		t.Fatalf("claimed %v, want A's retry and B's second", got)
	}
	// Out of attempts, A's first job is discarded and A goes on.
	failA = queue.Finish{Lease: got[0].Lease(), Outcome: queue.OutcomeRetry, Error: &queue.AttemptError{Error: "boom"}}
	if stale, err := c.Finish(ctx, []queue.Finish{failA}); err != nil || len(stale) != 0 {
		t.Fatalf("fail: %v %v", stale, err)
	}
	if st := stateOf(t, c, a[0]); st != queue.StateDiscarded {
		t.Fatalf("A's first job is %s, want discarded", st)
	}
	complete(t, c, got[1])
	got = claim(t, c, "s", 10, time.Minute)
	if len(got) != 2 || got[0].ID != a[1] || got[1].ID != b[2] {
		t.Fatalf("claimed %v, want A's second and B's third", got)
	}
}

// TestSequenceHaltsOnDiscard: with FailureHalt a discarded job halts its
// sequence until it is retried, and then it runs first.
func TestSequenceHaltsOnDiscard(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	setLimit(t, c, pgqueue.Limit{Name: "ledger", Queue: "h", Sequence: true, OnFailure: pgqueue.FailureHalt})
	ids := enqueueN(t, c, queue.EnqueueParams{Kind: "post", Queue: "h", LimitKey: "acct-1"}, 2)
	got := claim(t, c, "h", 10, time.Minute)
	if len(got) != 1 || got[0].ID != ids[0] {
		t.Fatalf("claimed %v", got)
	}
	if stale, err := c.Finish(ctx, []queue.Finish{{Lease: got[0].Lease(), Outcome: queue.OutcomeDiscard}}); err != nil || len(stale) != 0 {
		t.Fatalf("discard: %v %v", stale, err)
	}
	if _, err := c.GrantWaiting(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if st := stateOf(t, c, ids[1]); st != queue.StateLimited {
		t.Fatalf("behind a discarded job of a halting sequence, job %d is %s, want limited", ids[1], st)
	}
	if err := c.Retry(ctx, ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GrantWaiting(ctx, 100); err != nil {
		t.Fatal(err)
	}
	got = claim(t, c, "h", 10, time.Minute)
	if len(got) != 1 || got[0].ID != ids[0] {
		t.Fatalf("after the retry claimed %v, want the retried job %d first", got, ids[0])
	}
	complete(t, c, got[0])
	if got = claim(t, c, "h", 10, time.Minute); len(got) != 1 || got[0].ID != ids[1] {
		t.Fatalf("claimed %v, want job %d", got, ids[1])
	}
}

// TestLimitChangesAtRunTime: raising a limit hands out its new slots at
// once, lowering it holds new jobs back until the running ones are under
// it, and deleting it releases every waiting job.
func TestLimitChangesAtRunTime(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	setLimit(t, c, pgqueue.Limit{Name: "l", Queue: "rt", Concurrency: 1})
	ids := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "rt"}, 8)
	first := claim(t, c, "rt", 10, time.Minute)
	if len(first) != 1 {
		t.Fatalf("claimed %d, want 1", len(first))
	}
	setLimit(t, c, pgqueue.Limit{Name: "l", Queue: "rt", Concurrency: 3})
	second := claim(t, c, "rt", 10, time.Minute)
	if len(second) != 2 {
		t.Fatalf("after raising the limit to 3 claimed %d more, want 2", len(second))
	}
	setLimit(t, c, pgqueue.Limit{Name: "l", Queue: "rt", Concurrency: 2})
	complete(t, c, first[0])
	if got := claim(t, c, "rt", 10, time.Minute); len(got) != 0 {
		t.Fatalf("with 2 running under a limit lowered to 2, claimed %d more", len(got))
	}
	complete(t, c, second[0])
	if got := claim(t, c, "rt", 10, time.Minute); len(got) != 1 {
		t.Fatalf("with 1 running under a limit of 2, claimed %d, want 1", len(got))
	}
	if err := c.DeleteLimit(ctx, "l"); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, c, "rt", 10, time.Minute); len(got) != len(ids)-4 {
		t.Fatalf("after deleting the limit claimed %d, want the %d waiting", len(got), len(ids)-4)
	}
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "rt"}); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, c, "rt", 10, time.Minute); len(got) != 1 {
		t.Fatalf("a job inserted after the delete: claimed %d, want 1", len(got))
	}
}

// TestRateLimit: at most Rate jobs of a partition start in any Period:
// each start is at least a Period after the start of the job that last
// held its rate slot, by the database's clock.
func TestRateLimit(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	const period = 300 * time.Millisecond
	setLimit(t, c, pgqueue.Limit{Name: "r", Queue: "rate", Rate: 2, Period: period})
	ids := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "rate"}, 6)
	if got := claim(t, c, "rate", 10, time.Minute); len(got) != 2 {
		t.Fatalf("claimed %d at once, want the rate's 2", len(got))
	} else {
		complete(t, c, got...)
	}
	deadline := time.Now().Add(60 * time.Second)
	done := 2
	for done < len(ids) {
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d jobs started", done, len(ids))
		}
		if _, err := c.GrantWaiting(ctx, 100); err != nil {
			t.Fatal(err)
		}
		got := claim(t, c, "rate", 10, time.Minute)
		complete(t, c, got...)
		done += len(got)
		time.Sleep(10 * time.Millisecond)
	}
	rows, err := db.Pool.Query(ctx, `SELECT attempted_at FROM jobfence_jobs WHERE queue = 'rate' ORDER BY attempted_at`)
	if err != nil {
		t.Fatal(err)
	}
	var starts []time.Time
	for rows.Next() {
		var at time.Time
		if err := rows.Scan(&at); err != nil {
			t.Fatal(err)
		}
		starts = append(starts, at)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	// Any 3 consecutive starts span at least a period.
	for i := 2; i < len(starts); i++ {
		if d := starts[i].Sub(starts[i-2]); d < period {
			t.Fatalf("starts %d and %d are %v apart: 3 starts within a period of %v (%v)", i-2, i, d, period, starts)
		}
	}
}

// TestEnqueueManyHonoursLimits: a batch goes through the limits too (not
// COPY, which cannot find them), and its free slots are granted at once.
func TestEnqueueManyHonoursLimits(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	setLimit(t, c, pgqueue.Limit{Name: "b", Queue: "bulk", PartitionBy: []string{"tenant"}, Concurrency: 2})
	var ps []queue.EnqueueParams
	for i := range 10 {
		ps = append(ps, queue.EnqueueParams{Kind: "k", Queue: "bulk", Args: []byte(fmt.Sprintf(`{"tenant": "t%d"}`, i%2))})
	}
	if n, err := c.EnqueueMany(ctx, ps); err != nil || n != 10 {
		t.Fatalf("EnqueueMany = %d, %v", n, err)
	}
	got := claim(t, c, "bulk", 100, time.Minute)
	tenants := map[string]int{}
	for _, j := range got {
		tenants[strings.TrimSpace(string(j.EncodedArgs))]++
	}
	if len(got) != 4 || slices.ContainsFunc(mapValues(tenants), func(n int) bool { return n != 2 }) {
		t.Fatalf("claimed %d jobs by tenant %v, want 2 of each", len(got), tenants)
	}
}

func mapValues(m map[string]int) []int {
	var out []int
	for _, v := range m {
		out = append(out, v)
	}
	return out
}

// TestLimitedJobIsUnfinishedToUniqueness: a unique job that waits for a
// slot refuses a duplicate as an available one does (migration 00013
// counts limited with available in jobfence_state_in_bitmask).
func TestLimitedJobIsUnfinishedToUniqueness(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	setLimit(t, c, pgqueue.Limit{Name: "u", Queue: "uq", Concurrency: 1})
	enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "uq"}, 1)
	p := queue.EnqueueParams{Kind: "k", Queue: "uq", Args: []byte(`{"x": 1}`), Unique: &queue.UniqueOpts{ByArgs: true}}
	first, err := c.Enqueue(ctx, p)
	if err != nil || !first.Inserted || stateOf(t, c, first.ID) != queue.StateLimited {
		t.Fatalf("first unique insert = %+v, %v; want it inserted, limited", first, err)
	}
	second, err := c.Enqueue(ctx, p)
	if err != nil || second.Inserted || second.ID != first.ID {
		t.Fatalf("duplicate of a limited job = %+v, %v; want refused, naming job %d", second, err, first.ID)
	}
}

// holdRow locks job id's row in a transaction that stays open, silent,
// as a frozen client inside a transaction would hold it, until the test
// rolls it back or ends.
func holdRow(t *testing.T, db *pgtest.DB, id int64) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx := pgtest.Begin(t, db.Pool)
	if _, err := tx.Exec(ctx, `SELECT FROM jobfence_jobs WHERE id = $1 FOR UPDATE`, id); err != nil {
		t.Fatal(err)
	}
	return tx
}

// heldSequence sets a sequence on queue q, inserts 2 jobs and claims the
// first (got), and holds the second's row in a transaction (tx) that the
// test ends, as a frozen client inside a transaction would hold it.
func heldSequence(t *testing.T, c *pgqueue.Client, db *pgtest.DB, q string) (ids []int64, got []*queue.Job, tx pgx.Tx) {
	t.Helper()
	setLimit(t, c, pgqueue.Limit{Name: q, Queue: q, Sequence: true})
	ids = enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: q}, 2)
	got = claim(t, c, q, 10, time.Minute)
	if len(got) != 1 || got[0].ID != ids[0] {
		t.Fatalf("claimed %v", got)
	}
	return ids, got, holdRow(t, db, ids[1])
}

// TestGrantWaitIsBounded: a sequence's grant waits for its oldest waiting
// job's row (it must go first) only as long as the batch's lock_timeout: a
// session that holds the row and stays silent, as a frozen client inside
// a transaction would, makes the grant fail within about a second rather
// than hang, and the next grant after it lets go hands the slot out.
// Another limit's grant passes over the held job at once.
func TestGrantWaitIsBounded(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	ids, got, tx := heldSequence(t, c, db, "bw")
	// The completion applies; its grant gives up on the held row (logged).
	complete(t, c, got[0])
	began := time.Now()
	_, err := c.GrantWaiting(ctx, 100)
	if err == nil || !strings.Contains(err.Error(), "55P03") {
		t.Fatalf("grant beside a held row = %v, want a lock timeout (55P03)", err)
	}
	if took := time.Since(began); took > 20*time.Second {
		t.Fatalf("the grant gave up after %v, want about its 1 s lock_timeout", took)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GrantWaiting(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if got := claim(t, c, "bw", 10, time.Minute); len(got) != 1 || got[0].ID != ids[1] {
		t.Fatalf("after the holder let go claimed %v, want job %d", got, ids[1])
	}
}

// TestGrantSkipsAHeldJob: outside a sequence, a grant passes over a
// waiting job whose row a silent session holds, and hands the slot to the
// next one at once.
func TestGrantSkipsAHeldJob(t *testing.T) {
	c, db := newClient(t)
	setLimit(t, c, pgqueue.Limit{Name: "s", Queue: "skip", Concurrency: 1})
	ids := enqueueN(t, c, queue.EnqueueParams{Kind: "k", Queue: "skip"}, 3)
	got := claim(t, c, "skip", 10, time.Minute)
	if len(got) != 1 || got[0].ID != ids[0] {
		t.Fatalf("claimed %v", got)
	}
	holdRow(t, db, ids[1])
	complete(t, c, got[0])
	if got := claim(t, c, "skip", 10, time.Minute); len(got) != 1 || got[0].ID != ids[2] {
		t.Fatalf("beside a held waiting job claimed %v, want job %d", got, ids[2])
	}
}

// TestSetLimitAppliesToJobsInsertedBefore: a limit set after jobs were
// inserted governs those that have not started: the available ones wait
// for a slot at once, by the partition their args give, and a scheduled
// one waits for a slot when its time comes.
func TestSetLimitAppliesToJobsInsertedBefore(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	var ids []int64
	for _, customer := range []int{1, 1, 1, 2, 2} {
		ids = append(ids, enqueueN(t, c, queue.EnqueueParams{Queue: "late", Kind: "k", Args: fmt.Appendf(nil, `{"c":%d}`, customer)}, 1)...)
	}
	later := enqueueN(t, c, queue.EnqueueParams{Queue: "late", Kind: "k", Args: []byte(`{"c":1}`), ScheduledAt: time.Now().Add(time.Hour)}, 1)[0]
	other := enqueueN(t, c, queue.EnqueueParams{Queue: "other", Kind: "k", Args: []byte(`{"c":1}`)}, 1)[0]
	setLimit(t, c, pgqueue.Limit{Name: "per-customer", Queue: "late", PartitionBy: []string{"c"}, Concurrency: 1})

	var states []string
	for _, id := range ids {
		states = append(states, string(stateOf(t, c, id)))
	}
	if want := "available limited limited available limited"; strings.Join(states, " ") != want {
		t.Fatalf("states after SetLimit: %q, want %q (the oldest job of each customer granted, the rest waiting)", strings.Join(states, " "), want)
	}
	if s := stateOf(t, c, other); s != queue.StateAvailable {
		t.Fatalf("a job of another queue is %s, want available", s)
	}
	jobs := claim(t, c, "late", 10, time.Minute)
	if len(jobs) != 2 {
		t.Fatalf("claimed %d jobs, want one per customer", len(jobs))
	}
	// The scheduled job's time comes: it waits behind its customer's.
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET scheduled_at = now() - interval '1 second' WHERE id = $1`, later); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Promote(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if s := stateOf(t, c, later); s != queue.StateLimited {
		t.Fatalf("the scheduled job, due, is %s; want limited behind its customer's running job", s)
	}
	complete(t, c, jobs...)
	var order []int64
	for range 4 {
		js := claim(t, c, "late", 10, time.Minute)
		for _, j := range js {
			order = append(order, j.ID)
		}
		complete(t, c, js...)
	}
	if want := []int64{ids[1], ids[4], ids[2], later}; !slices.Equal(order, want) {
		t.Fatalf("the waiting jobs ran in the order %v, want %v (each customer's oldest first)", order, want)
	}
}

// TestDebounceMovesALimitedJob: a debounced insert moves a duplicate that
// waits for a limit's slot as it moves a scheduled one: put off, it is
// scheduled and waits for a slot again when its time comes; moved to now,
// it waits for the slot. An available duplicate moved to now keeps its
// slot; put off, it frees it for the next job.
func TestDebounceMovesALimitedJob(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	setLimit(t, c, pgqueue.Limit{Name: "deb", Queue: "deb", Concurrency: 1})
	u := &queue.UniqueOpts{ByArgs: true, Debounce: true}
	ins := func(n int, at time.Time) queue.EnqueueResult {
		t.Helper()
		res, err := c.Enqueue(ctx, queue.EnqueueParams{Queue: "deb", Kind: "k", Args: fmt.Appendf(nil, `{"n":%d}`, n), ScheduledAt: at, Unique: u})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a, b := ins(1, time.Time{}), ins(2, time.Time{})
	if sa, sb := stateOf(t, c, a.ID), stateOf(t, c, b.ID); sa != queue.StateAvailable || sb != queue.StateLimited {
		t.Fatalf("inserted jobs are %s and %s, want available (granted) and limited", sa, sb)
	}
	later := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	if res := ins(2, later); !res.Debounced || res.ID != b.ID || res.State != queue.StateScheduled {
		t.Fatalf("debounced the limited job to later: %+v, want job %d moved and scheduled", res, b.ID)
	}
	if j, err := c.Get(ctx, b.ID); err != nil || !j.ScheduledAt.Equal(later) {
		t.Fatalf("the put-off job: %+v %v, want it scheduled at %v", j, err, later)
	}
	if res := ins(2, time.Time{}); !res.Debounced || res.ID != b.ID || res.State != queue.StateLimited {
		t.Fatalf("debounced the put-off job to now: %+v, want it limited behind job %d's slot", res, a.ID)
	}
	if res := ins(1, time.Time{}); !res.Debounced || res.State != queue.StateAvailable {
		t.Fatalf("debounced the available job to now: %+v, want it available with its slot", res)
	}
	if s := stateOf(t, c, b.ID); s != queue.StateLimited {
		t.Fatalf("job %d is %s, want limited: the slot is still job %d's", b.ID, s, a.ID)
	}
	// Put off, the available job frees its slot for the waiting one.
	if res := ins(1, later); !res.Debounced || res.State != queue.StateScheduled {
		t.Fatalf("debounced the available job to later: %+v, want it scheduled", res)
	}
	if s := stateOf(t, c, b.ID); s != queue.StateAvailable {
		t.Fatalf("job %d is %s, want available: the put-off job's slot is free", b.ID, s)
	}
	// Its time come, the put-off job waits for the slot again.
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET scheduled_at = now() - interval '1 second' WHERE id = $1`, a.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Promote(ctx, 100); err != nil {
		t.Fatal(err)
	}
	if s := stateOf(t, c, a.ID); s != queue.StateLimited {
		t.Fatalf("the put-off job, due, is %s; want limited", s)
	}
}

// TestSetLimitWaitsForInsertsInFlight: jobs inserted by a transaction
// that read the limits before a new one was stored, and committed after,
// come under it: SetLimit waits for that transaction before it brings
// the available jobs under the limit. A transaction that stays open (its
// client frozen) holds SetLimit up for Config.LimitSettle only, which it
// logs; the limit is stored all the same.
func TestSetLimitWaitsForInsertsInFlight(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: slog.New(slog.DiscardHandler), LimitSettle: time.Minute})
	const q = "inflight"
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	var ids []int64
	for range 2 {
		res, err := c.EnqueueTx(ctx, tx, queue.EnqueueParams{Queue: q, Kind: "k"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}
	done := make(chan error, 1)
	go func() { done <- c.SetLimit(ctx, pgqueue.Limit{Name: q, Queue: q, Concurrency: 1}) }()
	testwatch.WaitFor(t, time.Minute, "the limit stored", func() bool {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_limits WHERE name = $1`, q).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 1
	})
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("SetLimit did not return")
	}
	var got []string
	for _, id := range ids {
		j, err := c.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, string(j.State)+"/"+j.Limit)
	}
	slices.Sort(got)
	if want := []string{"available/" + q, "limited/" + q}; !slices.Equal(got, want) {
		t.Fatalf("the jobs inserted in flight are %v, want %v (under the limit: one granted, one waiting)", got, want)
	}

	// A transaction left open, as by a frozen client that inserted.
	frozen, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer frozen.Rollback(ctx)
	if _, err := c.EnqueueTx(ctx, frozen, queue.EnqueueParams{Queue: "other", Kind: "k"}); err != nil {
		t.Fatal(err)
	}
	logs := &logbuf.Buffer{}
	short := pgqueue.New(db.Pool, pgqueue.Config{Logger: slog.New(slog.NewTextHandler(logs, nil)), LimitSettle: 100 * time.Millisecond})
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := short.SetLimit(sctx, pgqueue.Limit{Name: "other", Queue: "other", Concurrency: 1}); err != nil {
		t.Fatalf("SetLimit beside an open transaction: %v", err)
	}
	if !strings.Contains(logs.String(), "some still are") {
		t.Fatalf("SetLimit beside an open transaction logged %q, want the warning that its jobs are not governed", logs.String())
	}
}
