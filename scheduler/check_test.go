package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

// TestStartNotMigrated: Start on a schema without jobfence's tables says
// so, in which schema, and what to run, and runs nothing.
func TestStartNotMigrated(t *testing.T) {
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	s := scheduler.New(pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet}), scheduler.Config{Logger: quiet})
	if err := s.Add("nightly", "0 3 * * *", "report", nil, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	err := s.Start(context.Background())
	want := fmt.Sprintf("scheduler: start: jobfence's tables are missing in schema %q", db.Schema)
	if !errors.Is(err, queue.ErrNotSetUp) || !errors.Is(err, migrations.ErrNotMigrated) ||
		!strings.HasPrefix(fmt.Sprint(err), want) || !strings.Contains(err.Error(), "run `jobfence migrate up`") {
		t.Fatalf("Start = %v\nwant an ErrNotMigrated starting %q and naming jobfence migrate up", err, want)
	}
	if err := s.Stop(context.Background()); !errors.Is(err, scheduler.ErrNotStarted) {
		t.Fatalf("Stop after a failed Start = %v, want ErrNotStarted", err)
	}
}
