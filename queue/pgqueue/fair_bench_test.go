package pgqueue_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// envInt reads a positive integer from the environment variable name, or
// returns def.
func envInt(b *testing.B, name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive whole number", name, v)
	}
	return n
}

// BenchmarkFairBacklog: tenant A's backlog (JOBFENCE_FAIR_BACKLOG jobs,
// 100,000 by default) waits under a limit of 8 shared by every tenant,
// and tenant B inserts one job every 50 ms for JOBFENCE_FAIR_SECONDS (10)
// seconds while 8 workers run the jobs (each job 1 ms; a worker claims,
// runs, completes, and its completion grants the slot it frees). It
// reports B's waits, from insert to start (a job not started by the end
// counts the time it has waited: a lower bound), at the median and the
// 99th percentile, the share of B's jobs started, and the jobs run a
// second. Sub-benchmarks: oldest-first (no FairBy) and fair (FairBy
// "tenant"); -count N runs them in turn, N times. Run it with -benchtime 1x
// (docs/benchmarks/fair.md).
func BenchmarkFairBacklog(b *testing.B) {
	backlog := envInt(b, "JOBFENCE_FAIR_BACKLOG", 100000)
	seconds := envInt(b, "JOBFENCE_FAIR_SECONDS", 10)
	for _, fair := range []bool{false, true} {
		name := "oldest-first"
		if fair {
			name = "fair"
		}
		b.Run(name, func(b *testing.B) {
			for range b.N {
				fairBacklogRun(b, fair, backlog, time.Duration(seconds)*time.Second)
			}
		})
	}
}

func fairBacklogRun(b *testing.B, fair bool, backlog int, d time.Duration) {
	const workers, concurrency, jobTime, trickle = 8, 8, time.Millisecond, 50 * time.Millisecond
	b.StopTimer()
	db := pgtest.New(b)
	ctx := context.Background()
	pool := pgtest.AppPool(b, db, "bench-fair", workers+4)
	c := pgqueue.New(pool, pgqueue.Config{})
	defer c.Close()
	l := pgqueue.Limit{Name: "shared", Queue: "work", Concurrency: concurrency}
	if fair {
		l.FairBy = "tenant"
	}
	if err := c.SetLimit(ctx, l); err != nil {
		b.Fatal(err)
	}
	for done := 0; done < backlog; {
		n := min(5000, backlog-done)
		ps := make([]queue.EnqueueParams, n)
		for i := range ps {
			ps[i] = queue.EnqueueParams{Kind: "k", Queue: "work", Args: fmt.Appendf(nil, `{"tenant": "A", "i": %d}`, done+i)}
		}
		if _, err := c.EnqueueMany(ctx, ps); err != nil {
			b.Fatal(err)
		}
		done += n
	}
	if _, err := db.Pool.Exec(ctx, "ANALYZE jobfence_jobs"); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	runCtx, stop := context.WithTimeout(ctx, d)
	defer stop()
	var ran atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers+1)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for runCtx.Err() == nil {
				jobs, err := c.Claim(runCtx, queue.ClaimParams{Queue: "work", Limit: 1, Lease: time.Minute, WorkerID: fmt.Sprint("w", w)})
				if err != nil {
					if runCtx.Err() == nil {
						errs <- err
					}
					return
				}
				if len(jobs) == 0 {
					time.Sleep(2 * time.Millisecond)
					continue
				}
				time.Sleep(jobTime)
				if err := c.Complete(ctx, jobs[0].Lease()); err != nil {
					errs <- err
					return
				}
				ran.Add(1)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(trickle)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-runCtx.Done():
				return
			case <-t.C:
			}
			if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "work", Args: fmt.Appendf(nil, `{"tenant": "B", "i": %d}`, i)}); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	b.StopTimer()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	rows, err := db.Pool.Query(ctx, `SELECT extract(epoch FROM coalesce(attempted_at, now()) - created_at) * 1000, attempted_at IS NOT NULL
        FROM jobfence_jobs WHERE args ->> 'tenant' = 'B'
        UNION ALL
        SELECT extract(epoch FROM attempted_at - created_at) * 1000, true FROM jobfence_jobs_finished WHERE args ->> 'tenant' = 'B'`)
	if err != nil {
		b.Fatal(err)
	}
	var waits []float64
	started := 0
	for rows.Next() {
		var ms float64
		var ok bool
		if err := rows.Scan(&ms, &ok); err != nil {
			b.Fatal(err)
		}
		waits = append(waits, ms)
		if ok {
			started++
		}
	}
	if err := rows.Err(); err != nil {
		b.Fatal(err)
	}
	if len(waits) == 0 {
		b.Fatal("tenant B inserted no job")
	}
	slices.Sort(waits)
	q := func(p float64) float64 { return waits[min(len(waits)-1, int(p*float64(len(waits))))] }
	b.ReportMetric(q(0.5), "B-p50-ms")
	b.ReportMetric(q(0.99), "B-p99-ms")
	b.ReportMetric(100*float64(started)/float64(len(waits)), "B-started-%")
	b.ReportMetric(float64(ran.Load())/d.Seconds(), "jobs/s")
	b.ReportMetric(0, "ns/op")
}
