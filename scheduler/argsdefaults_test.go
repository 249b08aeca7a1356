package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

// digestArgs carries its insert defaults, so no schedule repeats them.
type digestArgs struct {
	Period string `json:"period"`
}

func (digestArgs) Kind() string { return "digest" }

func (digestArgs) InsertOpts() queue.InsertOpts {
	return queue.InsertOpts{Queue: "digests", Priority: 3, MaxAttempts: 4, Timeout: time.Minute}
}

// TestScheduleTakesArgsDefaults: a schedule whose args carry their insert
// defaults, added in code (AddArgs) or at run time (PutArgs), enqueues its
// fires with the type's queue, priority and max attempts; the schedule's
// own Options override them field by field.
func TestScheduleTakesArgsDefaults(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	client := pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet})
	s := scheduler.New(client, scheduler.Config{Logger: quiet})
	if err := s.AddArgs("daily-digest", "@daily", digestArgs{Period: "day"}, scheduler.Options{Priority: 1}); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	if _, err := s.PutArgs(ctx, "weekly-digest", "@weekly", digestArgs{Period: "week"}, scheduler.Options{MaxAttempts: 9}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name               string
		priority, attempts int
	}{
		{"daily-digest", 1, 4},
		{"weekly-digest", 3, 9},
	} {
		f, err := s.Trigger(ctx, tt.name)
		if err != nil {
			t.Fatal(err)
		}
		j, err := client.Get(ctx, f.JobID)
		if err != nil {
			t.Fatal(err)
		}
		if j.Kind != "digest" || j.Queue != "digests" || j.Priority != tt.priority || j.MaxAttempts != tt.attempts {
			t.Errorf("%s: job of kind %q in queue %q, priority %d, max attempts %d; want digest, digests, %d, %d",
				tt.name, j.Kind, j.Queue, j.Priority, j.MaxAttempts, tt.priority, tt.attempts)
		}
	}
}
