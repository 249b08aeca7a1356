package scenario

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/jobfencetest/devserver/devkafka"
	"github.com/jobfence/jobfence/migrations"
)

// workerProcessEnv names, in a worker process that Main started, the queue
// it works.
const workerProcessEnv = "JOBFENCE_EXAMPLE_WORKER_QUEUE"

// Servers says which servers Main provides: the ones DATABASE_URL,
// REDIS_URL and KAFKA_BROKERS name, or throwaway ones.
type Servers struct {
	Postgres, Redis, Kafka bool
}

// Main is an example program's main: it provides the servers that
// servers asks for, runs run on them (in a PostgreSQL schema of its own),
// prints progress and the result, removes what it created and exits
// non-zero if the scenario failed. Started as a worker process of the
// scenario, it runs RunShipWorker instead.
func Main(name string, servers Servers, run func(context.Context, *Env) (Result, error)) {
	MainWithChild(name, servers, run, RunShipWorker)
}

// MainWithChild is Main for a scenario whose worker processes run child
// rather than RunShipWorker.
func MainWithChild(name string, servers Servers, run func(context.Context, *Env) (Result, error), child func(ctx context.Context, q string, stdout io.Writer) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	if q := os.Getenv(workerProcessEnv); q != "" {
		err = child(ctx, q, os.Stdout)
	} else {
		err = runMain(ctx, name, servers, run)
	}
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func runMain(ctx context.Context, name string, servers Servers, run func(context.Context, *Env) (Result, error)) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("find this executable to run worker processes: %w", err)
	}
	srv, err := devserver.Start(ctx, devserver.Options{Postgres: servers.Postgres, Redis: servers.Redis})
	if err != nil {
		return err
	}
	defer srv.Close()
	var brokers []string
	if servers.Kafka {
		kafka, err := devkafka.Start(ctx, devkafka.Options{})
		if err != nil {
			return err
		}
		defer kafka.Close()
		brokers = kafka.Brokers
	}
	env := &Env{
		RedisURL: srv.RedisURL, KafkaBrokers: brokers,
		Logger:   slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
		Progress: func(format string, args ...any) { fmt.Printf(format+"\n", args...) },
	}
	if servers.Postgres {
		// A schema of the run's own: DATABASE_URL may name a database in use.
		schema, err := devserver.CreateSchema(ctx, srv.DatabaseURL, "example_")
		if err != nil {
			return err
		}
		defer func() {
			dropCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := schema.Drop(dropCtx); err != nil {
				fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
			}
		}()
		if err := migrations.Up(ctx, schema.URL); err != nil {
			return err
		}
		if env.Pool, err = pgxpool.New(ctx, schema.URL); err != nil {
			return err
		}
		defer env.Pool.Close()
		env.DatabaseURL = schema.URL
		env.WorkerProcess = func(ctx context.Context, q string) *exec.Cmd {
			cmd := exec.CommandContext(ctx, self)
			cmd.Env = append(os.Environ(), workerProcessEnv+"="+q, "DATABASE_URL="+schema.URL)
			cmd.Stderr = os.Stderr
			return cmd
		}
	}
	r, err := run(ctx, env)
	if err != nil {
		return err
	}
	r.Print(os.Stdout)
	if r.Verdict() != "PASS" {
		return fmt.Errorf("the scenario's invariant failed")
	}
	return nil
}
