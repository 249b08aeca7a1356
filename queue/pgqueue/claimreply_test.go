package pgqueue_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// readCounter counts the statements that read a claim's jobs after it
// committed (pgqueue.ClaimedSQL and the read by ID after it).
type readCounter struct{ reads atomic.Int64 }

func (r *readCounter) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if strings.HasPrefix(d.SQL, pgqueue.ClaimedSQL[:40]) {
		r.reads.Add(1)
	}
	return ctx
}

func (r *readCounter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// countingClient returns a client on db whose pool counts the reads of
// claimed jobs after their claim.
func countingClient(t *testing.T, db *pgtest.DB) (*pgqueue.Client, *readCounter) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	rc := &readCounter{}
	cfg.ConnConfig.Tracer = rc
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pgqueue.New(pool, pgqueue.Config{}), rc
}

// TestSmallClaimRepliesWithItsJobs: a claim of a few small jobs gets their
// rows in its own reply, with no read after it; a claim of many jobs, or
// of jobs whose rows are large, reads them after it committed. Either way
// a claimed job is the job as stored after the claim, every field.
func TestSmallClaimRepliesWithItsJobs(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, rc := countingClient(t, db)

	for _, tt := range []struct {
		name  string
		jobs  int
		args  int // bytes of padding in each job's args
		reads int64
	}{
		{"a few small jobs", 5, 10, 0},
		{"more jobs than a reply carries", 40, 10, 1},
		{"jobs too large for a reply", 3, 8 << 10, 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := strings.ReplaceAll(tt.name, " ", "-")
			args := []byte(fmt.Sprintf(`{"pad": %q}`, strings.Repeat("x", tt.args)))
			for i := range tt.jobs {
				_, err := c.Enqueue(ctx, queue.EnqueueParams{
					Kind: "k", Queue: q, Args: args, Priority: 2, MaxAttempts: 7,
					UniqueKey: fmt.Sprintf("%s-%d", q, i), Metadata: map[string]string{"tenant": "a"},
					Timeout: time.Minute, Deadline: time.Now().Add(time.Hour),
				})
				if err != nil {
					t.Fatal(err)
				}
			}
			before := rc.reads.Load()
			got := claim(t, c, q, 100, time.Minute)
			if len(got) != tt.jobs {
				t.Fatalf("claim took %d jobs, want %d", len(got), tt.jobs)
			}
			if reads := rc.reads.Load() - before; reads != tt.reads {
				t.Fatalf("the claim read its jobs in %d statements after it, want %d", reads, tt.reads)
			}
			for i, j := range got {
				if i > 0 && got[i-1].ID > j.ID {
					t.Fatalf("claimed jobs out of the queue's order: %d before %d", got[i-1].ID, j.ID)
				}
				stored, err := c.Get(ctx, j.ID)
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(j, stored) {
					t.Fatalf("claimed job\n%+v\nwant it as stored\n%+v", *j, *stored)
				}
				if j.State != queue.StateRunning || j.Attempt != 1 || j.Fence == 0 || j.UniqueKey == "" || j.Metadata["tenant"] != "a" {
					t.Fatalf("claimed job %+v: want running, attempt 1, fenced, its unique key and metadata", *j)
				}
			}
		})
	}
}

// TestSilentSmallClaimer: a claimer that stops reading while a small
// claim is in flight (the server's replies held by a proxy) does not keep
// the server waiting: the claim commits, so its jobs' row locks are
// released and the jobs hold a lease. Jobs of a few bytes come in the
// claim's reply; jobs of 4 MB each must not: eight of them, 32 MB, are
// more than the sockets' buffers hold (4 MB did fit on loopback), and the
// server would wait, their locks held, for the claimer to read.
func TestSilentSmallClaimer(t *testing.T) {
	for _, tt := range []struct {
		name string
		args int
	}{
		{"small jobs, in the reply", 10},
		{"large jobs, read after", 4 << 20},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const jobs = 8
			db := pgtest.New(t)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c := pgqueue.New(db.Pool, pgqueue.Config{})
			args := []byte(fmt.Sprintf(`{"pad": %q}`, strings.Repeat("x", tt.args)))
			for range jobs {
				if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Args: args}); err != nil {
					t.Fatal(err)
				}
			}
			goSilent(ctx, t, db, 8, time.Minute)
			// Committed: another session sees the jobs claimed. A server
			// blocked sending the reply would not have committed.
			testwatch.WaitFor(t, 30*time.Second, "the silent claim to commit", func() bool {
				var n int
				err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE state = 'running' AND 'silent' = ANY(attempted_by)`).Scan(&n)
				return err == nil && n == jobs
			})
			var writing int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'ClientWrite' AND query LIKE '%jobfence_jobs%'`).Scan(&writing); err != nil {
				t.Fatal(err)
			}
			if writing != 0 {
				t.Fatalf("%d server sessions wait to send a claim's reply, want none", writing)
			}
		})
	}
}

// TestClaimReadsDependencyTracesOnlyWhenAsked: a claimer that asks for
// its tasks' dependencies' traces gets them, read after the claim (they
// have no bound in its reply); one that does not gets none, and a small
// claim of tasks then comes in the claim's own reply, with no read after.
func TestClaimReadsDependencyTracesOnlyWhenAsked(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, rc := countingClient(t, db)
	const trace = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"

	for _, tt := range []struct {
		name   string
		traces bool
		reads  int64
	}{
		{"traces asked", true, 1},
		{"traces not asked", false, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			q := strings.ReplaceAll(tt.name, " ", "-")
			if _, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: q, Tasks: []queue.WorkflowTask{
				task("root", q), task("a", q, "root"), task("b", q, "root"),
			}}); err != nil {
				t.Fatal(err)
			}
			root := claim(t, c, q, 10, time.Minute)
			if len(root) != 1 {
				t.Fatalf("claimed %d tasks, want the root alone", len(root))
			}
			finish(t, c, queue.Finish{Lease: root[0].Lease(), Outcome: queue.OutcomeComplete, Workflow: true, Trace: []byte(trace)})
			before := rc.reads.Load()
			got, err := c.Claim(ctx, queue.ClaimParams{Queue: q, Limit: 10, Lease: time.Minute, WorkerID: "w", DependencyTraces: tt.traces})
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 2 {
				t.Fatalf("claimed %d tasks, want a and b", len(got))
			}
			if reads := rc.reads.Load() - before; reads != tt.reads {
				t.Errorf("the claim read its jobs %d times after it committed, want %d", reads, tt.reads)
			}
			for _, j := range got {
				var want []string
				if tt.traces {
					want = []string{trace}
				}
				if !reflect.DeepEqual(j.DependencyTraces, want) || !reflect.DeepEqual(j.DependsOn, []int64{root[0].ID}) {
					t.Errorf("task %s: traces %q and dependencies %v, want %q and [%d]", j.TaskName, j.DependencyTraces, j.DependsOn, want, root[0].ID)
				}
			}
		})
	}
}
