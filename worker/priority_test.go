package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type rankArgs struct{}

func (rankArgs) Kind() string { return "rank" }

// TestUrgentJobsOvertakeBacklog: 200 priority-1 jobs inserted into a
// backlog of 20,000 priority-4 jobs that a worker burns down at full
// speed each start before 2,000 more priority-4 jobs have started: a
// claim reads the bands above its queue's claim position from their start.
func TestUrgentJobsOvertakeBacklog(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	backlog := make([]queue.EnqueueParams, 20000)
	for i := range backlog {
		backlog[i] = queue.EnqueueParams{Kind: "rank", Priority: 4}
	}
	if _, err := c.EnqueueMany(ctx, backlog); err != nil {
		t.Fatal(err)
	}

	var (
		mu       sync.Mutex
		lowRun   int   // priority-4 jobs started
		mark     int   // lowRun just before the urgent jobs were inserted
		overtook []int // for each urgent job, the priority-4 starts after mark
	)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[rankArgs]) error {
		mu.Lock()
		defer mu.Unlock()
		if job.Priority == 1 {
			overtook = append(overtook, lowRun-mark)
		} else {
			lowRun++
		}
		return nil
	})
	startWorker(t, c, reg, worker.Config{Queues: map[string]int{queue.DefaultQueue: 100}})
	started := func() int {
		mu.Lock()
		defer mu.Unlock()
		return lowRun
	}
	testwatch.WaitFor(t, time.Minute, "the worker to be burning down the backlog", func() bool { return started() >= 2000 })

	urgent := make([]queue.EnqueueParams, 200)
	for i := range urgent {
		urgent[i] = queue.EnqueueParams{Kind: "rank", Priority: 1}
	}
	// Counted from before the insert: the starts during it count against
	// the urgent jobs.
	mu.Lock()
	mark = lowRun
	mu.Unlock()
	if _, err := c.EnqueueMany(ctx, urgent); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, time.Minute, "every urgent job to start", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(overtook) == len(urgent)
	})
	mu.Lock()
	defer mu.Unlock()
	worst := 0
	for _, n := range overtook {
		worst = max(worst, n)
	}
	t.Logf("the last urgent job started after %d more priority-4 jobs (backlog left at the insert: %d)", worst, len(backlog)-mark)
	if worst >= 2000 {
		t.Fatalf("an urgent job started after %d more priority-4 jobs, want fewer than 2,000", worst)
	}
	if mark >= len(backlog)-2000 {
		t.Fatalf("the backlog was nearly gone (%d of %d started) when the urgent jobs came: the test proves nothing", mark, len(backlog))
	}
}
