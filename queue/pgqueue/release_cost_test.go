package pgqueue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// releaseDependents is how many dependents the task released in the
// release cost measurements has.
const releaseDependents = 3

// releaseSetup inserts, through c, a workflow of size tasks in which the
// task "hub" has releaseDependents pending dependents (the others form a
// chain from a root of their own), after unrelated completed jobs, and
// returns hub's ID.
func releaseSetup(ctx context.Context, tb testing.TB, c *pgqueue.Client, db *pgtest.DB, size, unrelated int) int64 {
	tb.Helper()
	if unrelated > 0 {
		if _, err := db.Pool.Exec(ctx, `
INSERT INTO jobfence_jobs (queue, kind, state, finalized_at)
SELECT 'other', 'k', 'completed', now() FROM generate_series(1, $1)`, unrelated); err != nil {
			tb.Fatal(err)
		}
	}
	p := queue.WorkflowParams{Name: "cost", Tasks: []queue.WorkflowTask{task("hub", "cost")}}
	for i := range releaseDependents {
		p.Tasks = append(p.Tasks, task(fmt.Sprintf("dep-%d", i), "cost", "hub"))
	}
	prev := ""
	for i := len(p.Tasks); i < size; i++ {
		name := fmt.Sprintf("other-%d", i)
		if prev == "" {
			p.Tasks = append(p.Tasks, task(name, "cost2"))
		} else {
			p.Tasks = append(p.Tasks, task(name, "cost2", prev))
		}
		prev = name
	}
	return insertAnalyzed(ctx, tb, c, db, p, "hub")
}

// fanOutSetup inserts, through c, a workflow of the shape bench --mode
// fanout times (fanOut's, in queue "fan"); it returns root's ID.
func fanOutSetup(ctx context.Context, tb testing.TB, c *pgqueue.Client, db *pgtest.DB, width int) int64 {
	tb.Helper()
	p, _ := fanOut("fan", width)
	return insertAnalyzed(ctx, tb, c, db, p, "root")
}

// fanOut is a workflow of a task "root" that width tasks in queue q
// depend on, all of which the task "sum" depends on, and the names of the
// width tasks, in order.
func fanOut(q string, width int) (queue.WorkflowParams, []string) {
	p, names := fanParams(q, q, width)
	p.Tasks = append(p.Tasks, task("sum", q, names...))
	return p, names
}

// fanParams is a workflow name of a task "root" in queue rootQueue that
// width tasks of queue name depend on, and their names, in order.
func fanParams(name, rootQueue string, width int) (queue.WorkflowParams, []string) {
	p := queue.WorkflowParams{Name: name, Tasks: []queue.WorkflowTask{task("root", rootQueue)}}
	names := make([]string, width)
	for i := range names {
		names[i] = fmt.Sprintf("task-%d", i)
		p.Tasks = append(p.Tasks, task(names[i], name, "root"))
	}
	return p, names
}

// insertAnalyzed inserts the workflow p through c, vacuums and analyzes
// the jobs table, as autovacuum would have after such an insert, and
// returns the ID of p's task name.
func insertAnalyzed(ctx context.Context, tb testing.TB, c *pgqueue.Client, db *pgtest.DB, p queue.WorkflowParams, name string) int64 {
	tb.Helper()
	res, err := c.InsertWorkflow(ctx, p)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `VACUUM ANALYZE jobfence_jobs`); err != nil {
		tb.Fatal(err)
	}
	return res.Tasks[name]
}

// releasePlan is what EXPLAIN (ANALYZE, BUFFERS) says of one release.
type releasePlan struct {
	// buffers is the shared buffers the release hit or read.
	buffers int64
	// rows is the rows its plan's nodes returned or filtered out, over
	// all their loops: a join of every dependent to every other shows
	// there, where it reads no buffer (a CTE is in memory).
	rows float64
	// took is the server's execution time.
	took time.Duration
}

// releaseOnce ends the task id in a transaction (state: completed,
// discarded or cancelled), runs the release of all its dependents in one
// statement (no chunk left for ranges: this measures what each costs)
// under EXPLAIN (ANALYZE, BUFFERS), checks that it left want jobs of
// queue q in state changed, and rolls back. It times no node (TIMING
// OFF): the clock read around every row of every loop would slow a plan
// of many loops (a probe per dependent) more than one of a few scans.
func releaseOnce(ctx context.Context, tb testing.TB, db *pgtest.DB, id int64, state, q, changed string, want int) releasePlan {
	tb.Helper()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		tb.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `UPDATE jobfence_jobs SET state = $2, finalized_at = now() WHERE id = $1`, id, state); err != nil {
		tb.Fatal(err)
	}
	var raw []byte
	if err := tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, TIMING OFF, FORMAT JSON) "+pgqueue.ReleaseSQL,
		pgx.QueryExecModeDescribeExec, []int64{id}, 1<<30, "wake").Scan(&raw); err != nil {
		tb.Fatal(err)
	}
	var plan []struct {
		Plan struct {
			planNode
			Hit  int64 `json:"Shared Hit Blocks"`
			Read int64 `json:"Shared Read Blocks"`
		}
		Execution float64 `json:"Execution Time"`
	}
	if err := json.Unmarshal(raw, &plan); err != nil || len(plan) != 1 {
		tb.Fatalf("EXPLAIN output %.300s: %v", raw, err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE state = $1 AND queue = $2`, changed, q).Scan(&n); err != nil {
		tb.Fatal(err)
	}
	if n != want {
		tb.Fatalf("the release left %d jobs %s, want %d", n, changed, want)
	}
	p := releasePlan{
		buffers: plan[0].Plan.Hit + plan[0].Plan.Read,
		took:    time.Duration(plan[0].Execution * float64(time.Millisecond)),
	}
	plan[0].Plan.walk(func(n planNode) {
		p.rows += (n.Rows + n.Removed + n.RemovedJoin) * n.Loops
	})
	return p
}

// releaseHub releases the releaseDependents dependents of hub (see
// releaseSetup) and returns its plan's figures.
func releaseHub(ctx context.Context, tb testing.TB, db *pgtest.DB, hub int64) releasePlan {
	tb.Helper()
	return releaseOnce(ctx, tb, db, hub, "completed", "cost", "available", releaseDependents)
}

// TestReleaseCostIndependentOfSize: releasing a task's dependents reads
// as many buffers in a workflow of 10,000 tasks, alone in the table or
// beside 100,000 unrelated jobs, as in a workflow of 10 tasks alone, give
// or take the extra level of each B-tree: the release probes the primary
// key once per dependent (and the indexes its updates write), whatever
// the size of the workflow or of the table. The release in the workflow
// of 10,000 alone is repeated: the planner, which cannot know how many
// dependents a release has, once chose to scan such a table (some
// thousands of rows, too few for its estimates to favour probes), and a
// first release could hide that behind what its first read had cached.
// Buffers, unlike times, do not depend on the machine's load.
func TestReleaseCostIndependentOfSize(t *testing.T) {
	ctx := context.Background()
	measure := func(size, unrelated, times int) (most int64) {
		c, db := newClient(t)
		hub := releaseSetup(ctx, t, c, db, size, unrelated)
		for range times {
			most = max(most, releaseHub(ctx, t, db, hub).buffers)
		}
		return most
	}
	small := measure(10, 0, 1)
	wide := measure(10_000, 0, 3)
	large := measure(10_000, 100_000, 1)
	t.Logf("buffers of a release of %d dependents: %d in a workflow of 10 tasks, %d in one of 10,000 (the most of 3), %d in one of 10,000 beside 100,000 jobs",
		releaseDependents, small, wide, large)
	// Each B-tree a release reads or writes (the primary key and the
	// indexes of the updated rows, about 5) may be up to 2 levels deeper
	// in the large table, for each of the 4 rows (the task and its 3
	// dependents): 40 buffers. A release that scanned the workflow or the
	// table would read hundreds (10,000 tasks are 500 pages or more).
	for _, got := range []int64{wide, large} {
		if got > small+40 {
			t.Errorf("a release read %d buffers in a large table against %d in the small one: it grows with the table", got, small)
		}
	}
}

// TestReleaseOfAFanOutIsLinear: the release of a fan-out's 10,000
// dependents (made available when their root completes; cancelled, with
// the fan-in, when it is discarded) costs a bounded number of rows and
// buffers per dependent. Its plan reaches each dependent by a probe or a
// hash, never by joining every dependent to every other: a nested loop
// over the decrements (rewrite on the branch workflow-release-plan)
// compared 10,000 rows with 10,000 and took 90 s, reading few buffers
// more. Rows and buffers, unlike times, do not depend on the machine's
// load.
func TestReleaseOfAFanOutIsLinear(t *testing.T) {
	ctx := context.Background()
	const width = 10_000
	c, db := newClient(t)
	root := fanOutSetup(ctx, t, c, db, width)
	for _, tt := range []struct {
		state, changed string
		want           int
	}{
		{"completed", "available", width},
		{"discarded", "cancelled", width + 1},
	} {
		p := releaseOnce(ctx, t, db, root, tt.state, "fan", tt.changed, tt.want)
		perRow, perBuffer := p.rows/float64(tt.want), float64(p.buffers)/float64(tt.want)
		t.Logf("root %s: %d jobs %s, %.1f plan rows and %.1f buffers each", tt.state, tt.want, tt.changed, perRow, perBuffer)
		// A linear plan handles each dependent a few times over (its
		// edge, its decrement, its lock, its update, and for a cancel
		// the cascade's steps) and updates its row and the indexes: a
		// dozen rows and 15 to 30 buffers. A plan that joined every
		// dependent to every other handled 10,000 rows per dependent.
		if perRow > 100 || perBuffer > 100 {
			t.Errorf("the release of %d dependents (root %s) went through %.0f plan rows and %d buffers: it grows faster than its dependents",
				tt.want, tt.state, p.rows, p.buffers)
		}
	}
}

// BenchmarkReleaseCost times the release of a task's releaseDependents
// dependents (the server's execution time, from EXPLAIN ANALYZE, in a
// transaction rolled back after each) in a workflow of 10 tasks, in one of
// 10,000, and in one of 10 beside a million unrelated jobs, and the
// release of a fan-out's 10,000 dependents; see
// docs/benchmarks/workflows.md.
func BenchmarkReleaseCost(b *testing.B) {
	for _, tt := range []struct {
		name                   string
		size, unrelated, width int
	}{
		{name: "workflow-10", size: 10},
		{name: "workflow-10000", size: 10_000},
		{name: "workflow-10+1M-jobs", size: 10, unrelated: 1_000_000},
		{name: "fanout-10000", width: 10_000},
	} {
		b.Run(tt.name, func(b *testing.B) {
			ctx := context.Background()
			db := pgtest.New(b)
			c := pgqueue.New(db.Pool, pgqueue.Config{})
			var release func() releasePlan
			if tt.width > 0 {
				root := fanOutSetup(ctx, b, c, db, tt.width)
				release = func() releasePlan { return releaseOnce(ctx, b, db, root, "completed", "fan", "available", tt.width) }
			} else {
				hub := releaseSetup(ctx, b, c, db, tt.size, tt.unrelated)
				release = func() releasePlan { return releaseHub(ctx, b, db, hub) }
			}
			var server time.Duration
			var buffers int64
			n := 0
			for b.Loop() {
				p := release()
				server += p.took
				buffers += p.buffers
				n++
			}
			b.ReportMetric(float64(server.Microseconds())/float64(n), "server-µs/release")
			b.ReportMetric(float64(buffers)/float64(n), "buffers/release")
		})
	}
}
