package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// claimConfig shapes --mode claim's table.
type claimConfig struct {
	rows, future, ready, due, claims int
}

func (c claimConfig) validate() error {
	if c.rows < 1 || c.future < 0 || c.ready < 0 || c.due < 0 {
		return fmt.Errorf("--rows %d, --future %d, --ready %d, --due %d: want rows ≥ 1 and the others ≥ 0", c.rows, c.future, c.ready, c.due)
	}
	if c.future+c.ready+c.due > c.rows {
		return fmt.Errorf("--future %d + --ready %d + --due %d is more than --rows %d: the rest of the rows are completed jobs",
			c.future, c.ready, c.due, c.rows)
	}
	if c.claims < 1 {
		return fmt.Errorf("--claims %d: want at least 1", c.claims)
	}
	return nil
}

// The claim bench's table: the oldest rows are completed jobs, then
// retries due in an hour or later, retries already due, and the newest
// rows are ready to run. Each kind of row is written by one INSERT of $1
// rows.
const (
	fillCompletedSQL = `INSERT INTO jobfence_jobs (kind, args, state, attempt, attempted_at, finalized_at, created_at, scheduled_at)
	 SELECT 'bench', '{"n":1}', 'completed', 1, now() - i * interval '1 ms', now() - i * interval '1 ms',
	        now() - i * interval '1 ms' - interval '1 s', now() - i * interval '1 ms' - interval '1 s'
	 FROM generate_series($1::int, 1, -1) AS i`
	fillFutureSQL = `INSERT INTO jobfence_jobs (kind, args, state, attempt, attempted_at, created_at, scheduled_at, errors)
	 SELECT 'bench', '{"n":1}', 'retryable', 1, now(), now(), now() + interval '1 hour' + i * interval '1 ms',
	        '[{"attempt": 1, "error": "upstream said no"}]'
	 FROM generate_series(1, $1::int) AS i`
	fillDueSQL = `INSERT INTO jobfence_jobs (kind, args, state, attempt, attempted_at, created_at, scheduled_at, errors)
	 SELECT 'bench', '{"n":1}', 'retryable', 1, now() - interval '1 hour', now() - interval '1 hour', now() - i * interval '1 ms',
	        '[{"attempt": 1, "error": "upstream said no"}]'
	 FROM generate_series(1, $1::int) AS i`
	fillReadySQL = `INSERT INTO jobfence_jobs (kind, args, created_at, scheduled_at)
	 SELECT 'bench', '{"n":1}', now() - interval '1 s', now() - interval '1 s' FROM generate_series(1, $1::int)`
)

// runClaimBench builds a table of cfg.claim.rows jobs and measures what a
// claim costs in it: EXPLAIN (ANALYZE, BUFFERS) of claims rolled back, then
// real claims, then promotions of due jobs.
func runClaimBench(ctx context.Context, baseURL string, cfg benchConfig, stdout io.Writer) error {
	c := cfg.claim
	name := fmt.Sprintf("jobfence_bench_%d", time.Now().UnixNano())
	admin, err := pgx.Connect(ctx, baseURL)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	url, drop, err := runSchema(ctx, admin, baseURL, name, cfg.storageOptions())
	if err != nil {
		return err
	}
	defer drop()
	pool, err := newBenchPool(ctx, url, 4)
	if err != nil {
		return err
	}
	defer pool.Close()
	built := time.Now()
	fill := []struct {
		sql string
		n   int
	}{{fillCompletedSQL, c.rows - c.future - c.ready - c.due}, {fillFutureSQL, c.future}, {fillDueSQL, c.due}, {fillReadySQL, c.ready}}
	for _, f := range fill {
		if _, err := pool.Exec(ctx, f.sql, f.n); err != nil {
			return fmt.Errorf("bench: fill the jobs table: %w", err)
		}
	}
	// As autovacuum would have by the time such a table has grown.
	if _, err := pool.Exec(ctx, "VACUUM ANALYZE jobfence_jobs"); err != nil {
		return fmt.Errorf("bench: vacuum the jobs table: %w", err)
	}
	fmt.Fprintf(stdout, "claim: %d rows (%d retries due in an hour or later, %d retries due now, %d jobs ready, the rest completed), built and vacuumed in %.1fs; load %s\n",
		c.rows, c.future, c.due, c.ready, time.Since(built).Seconds(), loadAverage())

	client := pgqueue.New(pool, pgqueue.Config{})
	limit := cfg.fetchLimit
	if limit <= 0 {
		limit = 1000 // the worker's default FetchLimit
	}
	p := queue.ClaimParams{Queue: queue.DefaultQueue, Limit: limit, Lease: 30 * time.Second, WorkerID: "bench"}
	var exec []time.Duration
	var bufs, find []int64
	var jobs int64
	for range c.claims {
		plan, err := client.ExplainClaim(ctx, p)
		if err != nil {
			return err
		}
		exec, bufs, find, jobs = append(exec, plan.Execution), append(bufs, plan.Buffers), append(find, plan.FindBuffers), plan.Jobs
	}
	slices.Sort(exec)
	slices.Sort(bufs)
	slices.Sort(find)
	fmt.Fprintf(stdout, "claim: EXPLAIN (ANALYZE, BUFFERS) of a claim of up to %d jobs, %d times, rolled back: median %.3f ms (min %.3f, max %.3f), "+
		"%d buffers (%d finding and locking the jobs), %d jobs claimed\n",
		limit, c.claims, ms(exec[len(exec)/2]), ms(exec[0]), ms(exec[len(exec)-1]), bufs[len(bufs)/2], find[len(find)/2], jobs)

	var walls []time.Duration
	var claimed int
	for range c.claims {
		t := time.Now()
		js, err := client.Claim(ctx, p)
		if err != nil {
			return err
		}
		walls, claimed = append(walls, time.Since(t)), claimed+len(js)
	}
	slices.Sort(walls)
	fmt.Fprintf(stdout, "claim: %d real claims of up to %d jobs from this process (round trip included): median %.3f ms (max %.3f), %d jobs claimed in all\n",
		c.claims, limit, ms(walls[len(walls)/2]), ms(walls[len(walls)-1]), claimed)
	return promoteBench(ctx, client, c, stdout)
}

// promoteBench times what every worker's promoter costs: a call with
// nothing due, then, with --due, making every due retry available in the
// worker's batches.
func promoteBench(ctx context.Context, client *pgqueue.Client, c claimConfig, stdout io.Writer) error {
	const batch = 1000 // the worker's
	var walls []time.Duration
	moved := 0
	start := time.Now()
	for {
		t := time.Now()
		n, err := client.Promote(ctx, batch)
		if err != nil {
			return err
		}
		walls = append(walls, time.Since(t))
		k := 0
		for _, v := range n {
			k += v
		}
		moved += k
		if k < batch {
			break
		}
	}
	took := time.Since(start)
	if moved > 0 {
		fmt.Fprintf(stdout, "claim: promoting the %d due retries in batches of %d took %.2fs (%.0f jobs/s, %.1f ms per batch) from one promoter\n",
			moved, batch, took.Seconds(), float64(moved)/took.Seconds(), ms(took)/float64(len(walls)))
	}
	walls = walls[:0]
	for range c.claims {
		t := time.Now()
		if _, err := client.Promote(ctx, batch); err != nil {
			return err
		}
		walls = append(walls, time.Since(t))
	}
	slices.Sort(walls)
	fmt.Fprintf(stdout, "claim: %d promotions with nothing due (every worker's, every PromoteInterval): median %.3f ms (max %.3f)\n",
		c.claims, ms(walls[len(walls)/2]), ms(walls[len(walls)-1]))
	return nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
