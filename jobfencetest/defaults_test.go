package jobfencetest_test

import (
	"context"
	"testing"

	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// refund carries its insert defaults: its own queue and a unique key.
type refund struct {
	ID int `json:"id"`
}

func (refund) Kind() string { return "refund" }

func (r refund) InsertOpts() queue.InsertOpts {
	return queue.InsertOpts{Queue: "refunds", UniqueKey: "refund-1"}
}

// TestWorkTakesArgsDefaults: Work runs a job in the queue its args type
// names, as the insert puts it there, and names the type's unique key
// when a job holds it already.
func TestWorkTakesArgsDefaults(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{})
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[refund]) error { return nil })
	w := jobfencetest.NewPGWorker(t, client, reg, worker.Config{Queues: map[string]int{"refunds": 1}})
	r := jobfencetest.Work(ctx, t, w, refund{ID: 1}, nil)
	if r.Outcome != queue.OutcomeComplete || r.Job.Queue != "refunds" {
		t.Fatalf("Work: %s in queue %q; want completed in refunds", r, r.Job.Queue)
	}
	rec := &recorder{}
	jobfencetest.Work(ctx, rec, w, refund{ID: 1}, nil)
	rec.requireFailed(t, `already holds unique key "refund-1"`)
}
