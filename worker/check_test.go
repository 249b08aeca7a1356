package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/internal/logbuf"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// TestStartNotMigrated: Start on a schema without jobfence's tables returns
// an error saying so and what to run, instead of retrying claims forever;
// once migrated, the same worker starts.
func TestStartNotMigrated(t *testing.T) {
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	ctx := context.Background()
	w, err := worker.New(pgqueue.New(db.Pool, pgqueue.Config{}), noopRegistry(), worker.Config{Logger: quietLogger()})
	if err != nil {
		t.Fatal(err)
	}
	err = w.Start(ctx)
	want := fmt.Sprintf("jobfence: worker: start: jobfence's tables are missing in schema %q", db.Schema)
	if !errors.Is(err, queue.ErrNotSetUp) || !errors.Is(err, migrations.ErrNotMigrated) ||
		!strings.HasPrefix(fmt.Sprint(err), want) || !strings.Contains(err.Error(), "run `jobfence migrate up`") {
		t.Fatalf("Start = %v\nwant an ErrNotSetUp starting %q and naming jobfence migrate up", err, want)
	}
	if err := migrations.Up(ctx, db.URL); err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatalf("Start after migrating = %v", err)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestStartUnreachable: a backend that cannot be asked does not fail
// Start; the check's failure is logged and claims are retried as before.
func TestStartUnreachable(t *testing.T) {
	pool, err := pgxpool.New(context.Background(), "postgres://postgres@127.0.0.1:1/x")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	logs := &logbuf.Buffer{}
	logger := slog.New(slog.NewTextHandler(logs, nil))
	startWorker(t, pgqueue.New(pool, pgqueue.Config{Logger: logger}), noopRegistry(), worker.Config{Logger: logger})
	if !strings.Contains(logs.String(), "cannot check the backend; starting anyway") {
		t.Fatalf("Start logged:\n%s", logs)
	}
}

func noopRegistry() *worker.Registry {
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error { return nil })
	return reg
}
