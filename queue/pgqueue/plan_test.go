package pgqueue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestBatchStatementsProbeThePrimaryKey plans the statements that join jobs
// to arrays of IDs as they run through PgBouncer (unnamed statements,
// planned for their parameters) and as a prepared statement's generic
// plan (which PostgreSQL may keep after a few runs, and which a batch of
// outcomes asks for), with 1,000 IDs, on a table whose statistics were
// taken before any job ran. Each must reach the jobs
// through the primary key, never by scanning the table: with a scan, one
// batch compared every running row with every ID (seconds per batch), and
// locked rows in the table's order rather than the IDs'.
func TestBatchStatementsProbeThePrimaryKey(t *testing.T) {
	c, db := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ps := make([]queue.EnqueueParams, 5000)
	for i := range ps {
		ps[i] = queue.EnqueueParams{Kind: "k"}
	}
	for range 4 {
		if _, err := c.EnqueueMany(ctx, ps); err != nil {
			t.Fatal(err)
		}
	}
	// The statistics see 20,000 available jobs and none running.
	if _, err := db.Pool.Exec(ctx, "ANALYZE jobfence_jobs"); err != nil {
		t.Fatal(err)
	}
	jobs := claim(t, c, "default", 5000, time.Minute)
	if len(jobs) != 5000 {
		t.Fatalf("claimed %d jobs, want 5000", len(jobs))
	}
	const n = 1000
	ids, fences, delays := make([]int64, n), make([]int64, n), make([]int64, n)
	outcomes, errs, restarted := make([]int16, n), make([][]byte, n), make([]bool, n)
	for i, j := range jobs[:n] {
		ids[i], fences[i], outcomes[i] = j.ID, j.Fence, int16(queue.OutcomeComplete)
	}
	// The releases that claim also probe the available jobs' index, once
	// per queue and priority of their dependents, for a job a claim would
	// take first.
	queues, caps := []string{"default"}, []int32{1000}
	for _, tt := range []struct {
		name string
		sql  string
		args []any
	}{
		{"complete", pgqueue.CompleteSQL, []any{ids, fences, errs, errs}},
		{"finish", pgqueue.FinishSQL, []any{ids, fences, outcomes, delays, errs, errs, errs, delays, make([]*string, len(ids))}},
		{"release", pgqueue.ReleaseSQL, []any{ids, 1000, "wake"}},
		{"release range", pgqueue.ReleaseRangeSQL, []any{ids}},
		{"release and claim", pgqueue.ReleaseClaimSQL, []any{ids, 1000, queues, caps, time.Minute.Microseconds(), "w"}},
		{"release range and claim", pgqueue.ReleaseRangeClaimSQL, []any{ids, queues, caps, time.Minute.Microseconds(), "w", 1000}},
		{"heartbeat", pgqueue.HeartbeatSQL, []any{ids, fences, time.Minute.Microseconds()}},
		{"rescue", pgqueue.RescueSQL, []any{ids, fences, delays, restarted, make([]int32, n), queue.PutBackLimit}},
	} {
		for _, mode := range []string{"auto", "force_generic_plan"} {
			t.Run(tt.name+" "+mode, func(t *testing.T) {
				explainProbes(t, ctx, db, mode, tt.sql, tt.args)
			})
		}
	}
}

// explainProbes plans sql for args with plan_cache_mode mode and fails t
// unless it reads the jobs table only through its primary key (and, for
// the releases that claim, the available jobs' index).
func explainProbes(t *testing.T, ctx context.Context, db *pgtest.DB, mode, sql string, args []any) {
	t.Helper()
	tx := planTx(t, ctx, db.Pool, mode)
	defer tx.Rollback(ctx)
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+sql, append([]any{pgx.QueryExecModeDescribeExec}, args...)...).Scan(&raw); err != nil {
		t.Fatal(err)
	}
	var scans []string
	parsePlan(t, raw).walk(func(p planNode) {
		if p.Relation == "jobfence_jobs" && p.Type != "ModifyTable" {
			scans = append(scans, fmt.Sprintf("%s %s", p.Type, p.Index))
		}
	})
	ok := len(scans) > 0
	for _, s := range scans {
		ok = ok && (s == "Index Scan jobfence_jobs_pkey" ||
			(sql == pgqueue.ReleaseClaimSQL || sql == pgqueue.ReleaseRangeClaimSQL) &&
				(s == "Index Scan jobfence_jobs_available" || s == "Index Only Scan jobfence_jobs_available"))
	}
	if !ok {
		t.Fatalf("plan_cache_mode %s: the jobs table is read by %q, want only Index Scans of jobfence_jobs_pkey; plan:\n%s", mode, scans, raw)
	}
}

// planTx begins a transaction on pool whose statements are planned with
// plan_cache_mode mode ("auto", or "force_generic_plan" for the generic
// plan a prepared statement may keep); the caller rolls it back.
func planTx(t *testing.T, ctx context.Context, pool *pgxpool.Pool, mode string) pgx.Tx {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT set_config('plan_cache_mode', $1, true)", mode); err != nil {
		tx.Rollback(ctx)
		t.Fatal(err)
	}
	return tx
}

// planNode is a node of EXPLAIN's JSON output.
type planNode struct {
	Type      string     `json:"Node Type"`
	Subplan   string     `json:"Subplan Name"`
	Relation  string     `json:"Relation Name"`
	Index     string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	Plans     []planNode `json:"Plans"`
	// With EXPLAIN ANALYZE: the rows a node returned and filtered out
	// (by its filter, and by its join filter) per loop, and its loops.
	Rows        float64 `json:"Actual Rows"`
	Removed     float64 `json:"Rows Removed by Filter"`
	RemovedJoin float64 `json:"Rows Removed by Join Filter"`
	Loops       float64 `json:"Actual Loops"`
}

// parsePlan returns the plan of raw, the output of an EXPLAIN (FORMAT
// JSON) of one statement.
func parsePlan(t testing.TB, raw []byte) planNode {
	t.Helper()
	var plan []struct{ Plan planNode }
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		t.Fatalf("EXPLAIN output %.300s: %v", raw, err)
	}
	return plan[0].Plan
}

func (p planNode) walk(f func(planNode)) {
	f(p)
	for _, c := range p.Plans {
		c.walk(f)
	}
}

// find returns the first node of subplan name under p, or nil.
func (p planNode) find(name string) (found *planNode) {
	p.walk(func(n planNode) {
		if found == nil && n.Subplan == name {
			found = &n
		}
	})
	return found
}
