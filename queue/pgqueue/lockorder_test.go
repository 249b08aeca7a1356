package pgqueue_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// TestHeartbeatAndFinishDoNotDeadlock heartbeats a worker's running jobs in
// shuffled order while the same jobs finish in batches in descending order,
// some batches mixing completions with retries, as a worker's heartbeat and
// completers do. Both must lock rows in one order (ascending ID): otherwise
// Postgres finds deadlocks, fails one side after deadlock_timeout and the
// worker logs errors and retries.
func TestHeartbeatAndFinishDoNotDeadlock(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	const n = 3000
	ps := make([]queue.EnqueueParams, n)
	for i := range ps {
		ps[i] = queue.EnqueueParams{Kind: "k"}
	}
	if _, err := c.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	jobs := claim(t, c, "default", n, time.Minute)
	if len(jobs) != n {
		t.Fatalf("claimed %d jobs, want %d", len(jobs), n)
	}
	leases := make([]queue.Lease, n)
	for i, j := range jobs {
		leases[i] = j.Lease()
	}
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		shuffled := slices.Clone(leases)
		for {
			select {
			case <-stop:
				return
			default:
			}
			rand.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
			if _, err := c.Heartbeat(ctx, shuffled, time.Minute); err != nil {
				errs <- err
				return
			}
		}
	}()
	desc := slices.Clone(leases)
	slices.SortFunc(desc, func(a, b queue.Lease) int { return int(b.ID - a.ID) })
	for i := 0; i < n; i += 100 {
		var fs []queue.Finish
		for k, l := range desc[i : i+100] {
			f := queue.Finish{Lease: l, Outcome: queue.OutcomeComplete}
			if (i/100)%2 == 1 && k%3 == 0 {
				f.Outcome, f.Error = queue.OutcomeRetry, &queue.AttemptError{Error: "again"}
			}
			fs = append(fs, f)
		}
		stale, err := c.Finish(ctx, fs)
		if err != nil {
			close(stop)
			wg.Wait()
			t.Fatalf("Finish of batch %d: %v", i/100, err)
		}
		if len(stale) != 0 {
			t.Fatalf("Finish of batch %d: %d stale", i/100, len(stale))
		}
	}
	close(stop)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatalf("Heartbeat: %v", err)
	default:
	}
}
