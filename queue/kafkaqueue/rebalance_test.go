package kafkaqueue

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
)

// TestRebalanceEveryEffectOnce runs 8,000 jobs on 8 partitions with 3
// members, closes one mid-stream and adds another, and checks that every
// job's effect is in Postgres once and every offset is committed.
func TestRebalanceEveryEffectOnce(t *testing.T) {
	const (
		partitions = 8
		jobs       = 8000
	)
	db := pgtest.New(t)
	setupEffects(t, db.Pool)
	topic := uniqueName("jobs")
	c := newCluster(t, partitions, topic)
	cl := newTestClient(t, c)
	group := uniqueName("g")
	cfg := c.config(group, topic)
	cfg.ConcurrencyPerPartition = 8

	var inserted, takeovers, rejected atomic.Int64
	handler := func(name string) handlerFunc {
		pool := db.NewPool(t, 8)
		return func(ctx context.Context, j *queue.Job) queue.Finish {
			res, err := writeEffect(ctx, pool, j, name)
			if err != nil {
				// Cancelled by a revoke, or the database failed: run it again.
				return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeRetry, Error: &queue.AttemptError{Error: err.Error()}}
			}
			switch res {
			case effectInserted:
				inserted.Add(1)
			case effectTakeover:
				takeovers.Add(1)
			case effectRejected:
				rejected.Add(1)
			}
			return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete}
		}
	}
	members := map[string]*member{}
	for _, name := range []string{"a", "b", "c"} {
		members[name] = startMember(t, name, cfg, topic, 32, handler(name))
	}
	testwatch.WaitFor(t, time.Minute, "3 members to share the partitions", func() bool {
		total, gen := 0, int64(-1)
		for _, m := range members {
			a := m.b.Assignment()
			if len(a.Partitions[topic]) == 0 || (gen >= 0 && a.Generation != gen) {
				return false
			}
			gen = a.Generation
			total += len(a.Partitions[topic])
		}
		return total == partitions
	})

	// Produce while the members work.
	ctx := context.Background()
	var wg sync.WaitGroup
	produceErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		const chunk = 1000
		for start := 0; start < jobs; start += chunk {
			batch := make([]EnqueueJob, 0, chunk)
			for i := start; i < start+chunk; i++ {
				batch = append(batch, EnqueueJob{
					Params:       queue.EnqueueParams{Queue: topic, Kind: "effect", Args: fmt.Appendf(nil, `{"seq":%d}`, i)},
					PartitionKey: fmt.Sprintf("account-%d", i%997),
				})
			}
			if err := cl.EnqueueMany(ctx, batch); err != nil {
				produceErr <- err
				return
			}
		}
	}()

	progress := func(n int64) func() bool {
		return func() bool {
			for _, m := range members {
				m.checkErrs(t)
			}
			rows, _ := countEffects(t, db.Pool)
			return int64(rows) >= n
		}
	}
	testwatch.WaitFor(t, 2*time.Minute, "a quarter of the effects", progress(jobs/4))
	members["b"].close()
	delete(members, "b")
	testwatch.WaitFor(t, 2*time.Minute, "half of the effects", progress(jobs/2))
	members["d"] = startMember(t, "d", cfg, topic, 32, handler("d"))
	testwatch.WaitFor(t, time.Minute, "the new member to get partitions", func() bool {
		return len(members["d"].b.Assignment().Partitions[topic]) > 0
	})
	stopReport := make(chan struct{})
	go func() {
		for {
			select {
			case <-stopReport:
				return
			case <-time.After(5 * time.Second):
			}
			var as []string
			for n, m := range members {
				a := m.b.Assignment()
				as = append(as, fmt.Sprintf("%s: gen %d %v", n, a.Generation, a.Partitions))
			}
			if os.Getenv("KAFKAQUEUE_TEST_LOG") != "" {
				fmt.Fprintln(os.Stderr, "PROGRESS", inserted.Load(), as)
				for n, m := range members {
					fmt.Fprintln(os.Stderr, n, m.b.debugState())
				}
			}
		}
	}()
	testwatch.WaitFor(t, 3*time.Minute, "every effect", progress(jobs))
	close(stopReport)
	wg.Wait()
	select {
	case err := <-produceErr:
		t.Fatal(err)
	default:
	}
	waitCommitted(t, c, group, topic, partitions)

	rows, seqs := countEffects(t, db.Pool)
	if rows != jobs || seqs != jobs {
		t.Fatalf("effects: %d rows for %d distinct jobs, want %d of each", rows, seqs, jobs)
	}
	t.Logf("%d jobs: %d effects, one per job; %d runs again after a rebalance or a lost reply, absorbed by the key and fence (%d rewrote under a newer fence, %d rejected)",
		jobs, rows, takeovers.Load()+rejected.Load(), takeovers.Load(), rejected.Load())
}
