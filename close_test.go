package jobfence_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/worker"
)

// TestClose: Close stops a running client (a Stop after it finds it not
// running) and returns once its background work is done; it may be
// called again, and on a client that only inserts; a closed client's
// inserts still wake another process's workers (a LISTEN of a session of
// its own), each sending its own wake-up.
func TestClose(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	reg := jobfence.NewRegistry()
	ran := make(chan int64, 1)
	jobfence.AddHandler(reg, func(ctx context.Context, job *worker.Job[greet]) error {
		ran <- job.ID
		return nil
	})
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 1}, Handlers: reg})
	start(t, c)
	r, err := c.Insert(ctx, greet{Name: "ada"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case id := <-ran:
		if id != r.ID {
			t.Fatalf("ran job %d, want %d", id, r.ID)
		}
	case <-ctx.Done():
		t.Fatal("the job did not run")
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close of a running client: %v", err)
	}
	if err := c.Stop(ctx); !errors.Is(err, jobfence.ErrNotStarted) {
		t.Errorf("Stop after Close: %v, want ErrNotStarted", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Errorf("Close again: %v", err)
	}

	insertOnly, err := jobfence.NewClient(db.Pool, jobfence.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if err := insertOnly.Close(ctx); err != nil {
		t.Fatalf("Close of an insert-only client: %v", err)
	}
	wakes := pgtest.Listen(t, db.Pool, "jobfence_insert")
	closed, err := insertOnly.Insert(ctx, greet{Name: "bob"}, &jobfence.InsertOpts{Queue: "after-close"})
	if err != nil {
		t.Fatalf("Insert after Close: %v", err)
	}
	wakes.Next(t, time.Minute, "after-close")
	if st := state(t, c, closed.ID); st != queue.StateAvailable {
		t.Errorf("the job inserted after Close is %s, want available", st)
	}
}
