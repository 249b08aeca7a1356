package scheduler_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
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

// pingArgs asks for one unfinished job of its kind at a time.
type pingArgs struct{}

func (pingArgs) Kind() string { return "ping" }

func (pingArgs) InsertOpts() queue.InsertOpts {
	return queue.InsertOpts{Unique: &queue.UniqueOpts{}}
}

// TestFiresKeepTheirKeysBesideTypeUniqueness: a schedule of an args type
// with UniqueOpts still makes one job per fire through the fire's unique
// key, which refuses in every state: the fires are not refused as
// duplicates of each other while unfinished, no fire job gets a computed
// key, and a fire's key refuses the fire again after its job completed.
func TestFiresKeepTheirKeysBesideTypeUniqueness(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	client := pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet})
	rec := newRecorder()
	s := scheduler.New(client, scheduler.Config{Logger: quiet, OnFire: rec.onFire(0)})
	if err := s.AddArgs("ping", "* * * * * *", pingArgs{}, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	testwatch.WaitFor(t, time.Minute, "three fires inserted", func() bool { return len(rec.inserted(0)) >= 3 })
	stop(t, s)
	var computed int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE unique_hash IS NOT NULL OR unique_key IS NULL`).Scan(&computed); err != nil {
		t.Fatal(err)
	}
	if computed != 0 {
		t.Fatalf("%d fire jobs without their fire's key or with a computed one", computed)
	}
	all := jobs(t, db.Pool)
	checkOnePerFire(t, "ping", all)

	// Claims take the oldest ready job first: the first fire's.
	first := all[0]
	claimed, err := client.Claim(ctx, queue.ClaimParams{Queue: queue.DefaultQueue, Limit: 1, Lease: time.Minute, WorkerID: t.Name()})
	if err != nil || len(claimed) != 1 || !claimed[0].ScheduledAt.Equal(first.At) {
		t.Fatalf("claimed %v, %v; want the job of the first fire (%v)", claimed, err, first.At)
	}
	if err := client.Complete(ctx, claimed[0].Lease()); err != nil {
		t.Fatal(err)
	}
	again, err := client.Enqueue(ctx, queue.EnqueueParams{Kind: "ping", UniqueKey: first.Key, ScheduledAt: first.At})
	if err != nil || again.Inserted || again.State != queue.StateCompleted {
		t.Fatalf("the first fire again, its job completed: %+v %v; want it refused by the completed job", again, err)
	}
}
