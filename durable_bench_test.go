package jobfence_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/internal/devenv"
	"github.com/jobfence/jobfence/migrations"
)

// The three kinds of BenchmarkDurableSteps: one job of five no-op steps,
// a chain of five plain jobs each inserting the next in its handler's
// transaction, and one plain job.
type (
	benchSteps struct{}
	benchChain struct {
		Left int `json:"left"`
	}
	benchPlain struct{}
)

func (benchSteps) Kind() string { return "bench_steps" }
func (benchChain) Kind() string { return "bench_chain" }
func (benchPlain) Kind() string { return "bench_plain" }

// roundTrips counts the statements a pool sends while on: a query, a
// batch and a COPY are a round trip each; those naming table (default
// jobfence_steps) are counted apart too, in steps.
type roundTrips struct {
	table        string
	on           atomic.Bool
	total, steps atomic.Int64
}

func (r *roundTrips) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	if r.on.Load() {
		r.total.Add(1)
		if t := r.table; strings.Contains(d.SQL, t) || (t == "" && strings.Contains(d.SQL, "jobfence_steps")) {
			r.steps.Add(1)
		}
	}
	return ctx
}

func (r *roundTrips) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (r *roundTrips) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	if r.on.Load() {
		r.total.Add(1)
	}
	return ctx
}

func (r *roundTrips) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (r *roundTrips) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func (r *roundTrips) TraceCopyFromStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceCopyFromStartData) context.Context {
	if r.on.Load() {
		r.total.Add(1)
	}
	return ctx
}

func (r *roundTrips) TraceCopyFromEnd(context.Context, *pgx.Conn, pgx.TraceCopyFromEndData) {}

// serverTime is the server's execution time, in milliseconds, of this
// database's statements so far, those naming jobfence_steps apart, and the
// server's WAL position.
func serverTime(ctx context.Context, b *testing.B, conn *pgx.Conn, statements bool) (all, steps float64, wal int64) {
	return serverTimeOf(ctx, b, conn, statements, "jobfence_steps")
}

// serverTimeOf is serverTime with the statements naming table apart.
func serverTimeOf(ctx context.Context, b *testing.B, conn *pgx.Conn, statements bool, table string) (all, steps float64, wal int64) {
	b.Helper()
	if err := conn.QueryRow(ctx, `SELECT pg_current_wal_lsn() - '0/0'`).Scan(&wal); err != nil {
		b.Fatal(err)
	}
	if !statements {
		return 0, 0, wal
	}
	err := conn.QueryRow(ctx, `SELECT coalesce(sum(total_exec_time), 0),
		coalesce(sum(total_exec_time) FILTER (WHERE query LIKE '%' || $1 || '%'), 0)
		FROM pg_stat_statements
		WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database()) AND query NOT LIKE '%pg_stat_statements%'`, table).Scan(&all, &steps)
	if err != nil {
		b.Fatal(err)
	}
	return all, steps, wal
}

// benchServer starts a throwaway durable PostgreSQL (fsync on) with
// pg_stat_statements where it is installed, migrates it, and opens a pool
// of 20 whose round trips rt counts, and a connection of its own to read
// the server's statistics; all are closed or stopped when b ends.
// statements reports whether pg_stat_statements is there.
func benchServer(ctx context.Context, b *testing.B, rt *roundTrips) (pool *pgxpool.Pool, stats *pgx.Conn, statements bool) {
	b.Helper()
	pg, err := devenv.StartPostgresWith(ctx, devenv.PostgresOptions{Durable: true, StatStatements: true})
	if err != nil {
		b.Skipf("no PostgreSQL to start: %v", err)
	}
	b.Cleanup(func() { pg.Stop() })
	if err := migrations.Up(ctx, pg.URL); err != nil {
		b.Fatal(err)
	}
	cfg, err := pgxpool.ParseConfig(pg.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 20
	cfg.ConnConfig.Tracer = rt
	if pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if stats, err = pgx.Connect(ctx, pg.URL); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stats.Close(context.Background()) })
	statements = pg.StatStatements
	if statements {
		if _, err := stats.Exec(ctx, `CREATE EXTENSION IF NOT EXISTS pg_stat_statements`); err != nil {
			b.Fatal(err)
		}
	} else {
		b.Log("pg_stat_statements is not installed: no server time")
	}
	return pool, stats, statements
}

// runTimed starts client with the timer and rt's count running, waits
// (10 minutes at most) until its worker has completed want jobs, and
// stops both and the client.
func runTimed(ctx context.Context, b *testing.B, client *jobfence.Client, rt *roundTrips, want int64) {
	b.Helper()
	rt.on.Store(true)
	b.ResetTimer()
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Minute)
	for client.Worker().Stats().Completed < want {
		if time.Now().After(deadline) {
			b.Fatalf("%d of %d jobs completed after 10 minutes", client.Worker().Stats().Completed, want)
		}
		time.Sleep(time.Millisecond)
	}
	b.StopTimer()
	rt.on.Store(false)
	if err := client.Stop(ctx); err != nil {
		b.Fatal(err)
	}
}

// loadavg is the machine's one-minute load.
func loadavg() float64 {
	b, _ := os.ReadFile("/proc/loadavg")
	f, _ := strconv.ParseFloat(strings.Fields(string(b) + " 0")[0], 64)
	return f
}

// BenchmarkDurableSteps measures what a durable step costs against the
// ways to do five things without one: a job of 5 no-op steps (Step), a
// chain of 5 plain jobs each inserting the next with InsertTx in its
// AddHandlerTx transaction, and one plain no-op job, on a throwaway
// durable PostgreSQL (fsync on) with pg_stat_statements. Each
// sub-benchmark runs b.N jobs (or chains) inserted beforehand with
// InsertMany, worked by one client (8 at once), timed from Start to the
// last completion; the variants alternate, round after round. It reports
// jobs/s (a chain is one), the round trips the client's pool sent per job
// and per step (a pgx tracer), the server's execution time per job and of
// the step records per step (pg_stat_statements), WAL bytes per job and
// the machine's load. Figures: docs/benchmarks/durable.md. Run it as
//
//	flock -x /tmp/jobfence-bench.lock go test -run '^$' -bench DurableSteps -benchtime 1000x .
func BenchmarkDurableSteps(b *testing.B) {
	ctx := context.Background()
	var rt roundTrips
	pool, stats, statements := benchServer(ctx, b, &rt)

	const steps = 5
	var client *jobfence.Client // the chain's handler inserts with it
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[benchSteps]) error {
		for i := range steps {
			if _, err := jobfence.Step(ctx, "s"+strconv.Itoa(i), func(context.Context) (int, error) { return i, nil }); err != nil {
				return err
			}
		}
		return nil
	})
	jobfence.AddHandlerTx(reg, func(ctx context.Context, tx pgx.Tx, job *jobfence.Job[benchChain]) error {
		if job.Args.Left <= 1 {
			return nil
		}
		_, err := client.InsertTx(ctx, tx, benchChain{Left: job.Args.Left - 1}, &jobfence.InsertOpts{Queue: "bench"})
		return err
	})
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[benchPlain]) error { return nil })

	variants := []struct {
		name string
		args jobfence.Args
		jobs int // jobs completed per unit
	}{
		{"steps5", benchSteps{}, 1},
		{"chain5", benchChain{Left: steps}, steps},
		{"plain", benchPlain{}, 1},
	}
	for round := 1; round <= 3; round++ {
		for _, v := range variants {
			b.Run(fmt.Sprintf("round=%d/%s", round, v.name), func(b *testing.B) {
				var err error
				client, err = jobfence.NewClient(pool, jobfence.Config{Queues: map[string]int{"bench": 8}, Handlers: reg,
					Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				ps := make([]jobfence.InsertManyParams, b.N)
				for i := range ps {
					ps[i] = jobfence.InsertManyParams{Args: v.args, InsertOpts: &jobfence.InsertOpts{Queue: "bench"}}
				}
				if _, err := client.InsertMany(ctx, ps); err != nil {
					b.Fatal(err)
				}
				load := loadavg()
				all0, step0, wal0 := serverTime(ctx, b, stats, statements)
				rt.total.Store(0)
				rt.steps.Store(0)
				runTimed(ctx, b, client, &rt, int64(b.N*v.jobs))
				all1, step1, wal1 := serverTime(ctx, b, stats, statements)
				n := float64(b.N)
				b.ReportMetric(n/b.Elapsed().Seconds(), "jobs/s")
				b.ReportMetric(float64(rt.total.Load())/n, "rt/job")
				b.ReportMetric(float64(rt.steps.Load())/n/steps, "step-rt/step")
				if statements {
					b.ReportMetric((all1-all0)*1000/n, "server-µs/job")
					b.ReportMetric((step1-step0)*1000/n/steps, "step-server-µs/step")
				}
				b.ReportMetric(float64(wal1-wal0)/n, "WAL-B/job")
				b.ReportMetric((load+loadavg())/2, "load1")
			})
		}
	}
}
