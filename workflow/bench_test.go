package workflow_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
	"github.com/jobfence/jobfence/workflow"
)

type benchArgs struct{}

func (benchArgs) Kind() string { return "bench" }

// benchTasks is the width of the fan-out.
const benchTasks = 10_000

// BenchmarkFanOut compares a workflow of one task fanning out to
// benchTasks tasks that fan in to one (benchTasks+2 tasks) with
// benchTasks+2 independent jobs, each run by the same worker with a no-op
// handler, timed from insert to the last completion. Issue 30 asks the
// workflow to take at most 1.5 times as long; the release of dependents
// costs each completion one primary-key probe per dependent, and the
// fan-in's counter row one update per completion batch. Run it on a quiet
// machine: go test -run '^$' -bench FanOut ./workflow/.
func BenchmarkFanOut(b *testing.B) {
	run := func(b *testing.B, insert func(ctx context.Context, c *pgqueue.Client) error) {
		for range b.N {
			b.StopTimer()
			db := pgtest.New(b)
			c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet()})
			reg := worker.NewRegistry()
			worker.Add(reg, func(context.Context, *worker.Job[benchArgs]) error { return nil })
			w, err := worker.New(c, reg, worker.Config{Queues: map[string]int{"default": 100}, PollInterval: 20 * time.Millisecond, Logger: quiet()})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.StartTimer()
			if err := insert(ctx, c); err != nil {
				b.Fatal(err)
			}
			if err := w.Start(ctx); err != nil {
				b.Fatal(err)
			}
			deadline := time.Now().Add(10 * time.Minute)
			for {
				counts, err := c.Counts(ctx, "")
				if err != nil {
					b.Fatal(err)
				}
				if counts[queue.StateCompleted] == benchTasks+2 {
					break
				}
				if time.Now().After(deadline) {
					b.Fatalf("not done after 10 minutes: %v", counts)
				}
				time.Sleep(5 * time.Millisecond)
			}
			b.StopTimer()
			stopCtx, cancel := context.WithTimeout(ctx, time.Minute)
			w.Stop(stopCtx)
			cancel()
		}
	}
	b.Run("independent", func(b *testing.B) {
		run(b, func(ctx context.Context, c *pgqueue.Client) error {
			ps := make([]queue.EnqueueParams, benchTasks+2)
			for i := range ps {
				ps[i] = queue.EnqueueParams{Kind: benchArgs{}.Kind()}
			}
			_, err := c.EnqueueMany(ctx, ps)
			return err
		})
	})
	b.Run("workflow", func(b *testing.B) {
		run(b, func(ctx context.Context, c *pgqueue.Client) error {
			wf := workflow.New("fan").Add("root", benchArgs{}, nil)
			names := make([]string, benchTasks)
			for i := range names {
				names[i] = fmt.Sprintf("part-%d", i)
				wf.Add(names[i], benchArgs{}, &workflow.TaskOpts{DependsOn: []string{"root"}})
			}
			wf.Add("sum", benchArgs{}, &workflow.TaskOpts{DependsOn: names})
			_, err := workflow.Insert(ctx, c, wf)
			return err
		})
	})
}
