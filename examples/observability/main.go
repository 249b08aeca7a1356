// Command observability runs a worker instrumented with OpenTelemetry: the
// SDK with the Prometheus exporter serves /metrics, 200 jobs run (some fail
// once, one is fenced out as stale), and the program prints its own scrape.
//
//	go run ./examples/observability
//
// With DATABASE_URL set it uses that database; otherwise it starts a
// throwaway PostgreSQL. Log lines about jobs (on stderr) carry the job's
// id, kind, queue, attempt and fence, and its trace_id.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/propagation"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/jobfence/jobfence/examples/scenario"
	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/telemetry"
	"github.com/jobfence/jobfence/worker"
)

// Report is the job's typed arguments.
type Report struct {
	N int `json:"n"`
}

// Kind names the job's handler.
func (Report) Kind() string { return "report" }

// jobsToRun is how many jobs the example enqueues. Every tenth fails its
// first attempt, and job number staleN is fenced out once.
const (
	jobsToRun = 200
	staleN    = 7
	queueName = "observability"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Stdout); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, out io.Writer) error {
	env, err := devserver.Start(ctx, devserver.Options{Postgres: true}) // or your DATABASE_URL
	if err != nil {
		return err
	}
	defer env.Close()
	if err := migrations.Up(ctx, env.DatabaseURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, env.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()

	// The OpenTelemetry SDK, installed globally as a service would: the
	// Prometheus exporter is the meter provider's reader, and the tracer
	// provider samples every span (add an exporter to ship them).
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry))
	if err != nil {
		return err
	}
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	defer mp.Shutdown(context.Background())
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	otel.SetMeterProvider(mp)
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	defer srv.Close()
	metricsURL := "http://" + ln.Addr().String() + "/metrics"
	fmt.Fprintln(os.Stderr, "serving", metricsURL)

	// One call per component: producer spans on enqueue, then metrics,
	// consumer spans and trace ids in logs on the worker.
	var pgCfg pgqueue.Config
	if err := telemetry.PGQueue(&pgCfg, telemetry.Options{}); err != nil {
		return err
	}
	jobs := pgqueue.New(pool, pgCfg)

	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[Report]) error {
		time.Sleep(time.Duration(job.Args.N%5) * time.Millisecond) // some work
		if job.Attempt > 1 {
			return nil
		}
		if job.Args.N == staleN {
			return stealLease(ctx, pool, job.Job)
		}
		if job.Args.N%10 == 3 {
			return fmt.Errorf("report %d: upstream timed out", job.Args.N)
		}
		return nil
	})
	wcfg := worker.Config{
		Queues: map[string]int{queueName: 20},
		// Failed attempts retry after 100 ms rather than the default 1 s,
		// so the example ends quickly.
		RetryPolicy: worker.ExponentialRetry{Max: 100 * time.Millisecond},
		Logger:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if err := telemetry.Worker(&wcfg, telemetry.Options{}); err != nil {
		return err
	}
	w, err := worker.New(jobs, reg, wcfg)
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}

	// The jobs have a queue of their own, and waitCompleted counts only
	// those created from now on by the database's clock, so earlier runs
	// in a shared DATABASE_URL do not count.
	started := time.Now()
	ps := make([]queue.EnqueueParams, jobsToRun)
	for i := range ps {
		p, err := queue.Params(Report{N: i}, &queue.InsertOpts{Queue: queueName})
		if err != nil {
			return err
		}
		ps[i] = p
	}
	var since time.Time
	if err := pool.QueryRow(ctx, `SELECT now()`).Scan(&since); err != nil {
		return err
	}
	if _, err := jobs.EnqueueMany(ctx, ps); err != nil {
		return err
	}
	if err := waitCompleted(ctx, jobs, since); err != nil {
		return err
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%d jobs completed in %s; scraping %s\n", jobsToRun, time.Since(started).Round(time.Millisecond), metricsURL)

	resp, err := http.Get(metricsURL)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	_, err = io.Copy(out, resp.Body)
	return err
}

// stealLease does to job what a rescuer does after the job's lease ran out
// while its worker was paused: the job becomes ready again under a new
// fence. The attempt returns success, the backend refuses it as stale
// (jobfence_jobs_stale_total), and the next claim runs the job.
func stealLease(ctx context.Context, pool *pgxpool.Pool, job *queue.Job) error {
	_, err := pool.Exec(ctx, `UPDATE jobfence_jobs SET fence = nextval('jobfence_fence_seq'), state = 'available', scheduled_at = now()
		WHERE id = $1 AND fence = $2`, job.ID, job.Fence)
	return err
}

// waitCompleted waits until the jobs enqueued since since have completed.
// It reads them through the client's List, not with a query on
// jobfence_jobs: a completed job moves to jobfence_jobs_finished once the
// worker has made that table's partitions (as it starts), and List reads
// both tables. The jobs of this run are the newest of the queue.
func waitCompleted(ctx context.Context, jobs *pgqueue.Client, since time.Time) error {
	return scenario.WaitUntil(ctx, 2*time.Minute, "the jobs to complete", func() (bool, error) {
		done, err := jobs.List(ctx, pgqueue.ListParams{Queue: queueName, State: queue.StateCompleted, Limit: jobsToRun})
		if err != nil {
			return false, err
		}
		n := 0
		for _, j := range done {
			if !j.CreatedAt.Before(since) {
				n++
			}
		}
		return n == jobsToRun, nil
	})
}
