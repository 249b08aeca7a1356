package worker_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// waitingClaimsSQL counts app's claims that wait for a lock: a claim that
// found jobs waits, with their rows locked, for the fence it draws while a
// test holds the fence sequence. A claim is known by the claim position's
// table, which its text names in the first of the 1,024 bytes that
// pg_stat_activity keeps.
const waitingClaimsSQL = `SELECT count(*) FROM pg_stat_activity
WHERE application_name = $1 AND wait_event_type = 'Lock' AND query LIKE '%jobfence_claim_hints%'`

// fetchRig is a worker of two fetch loops whose handlers block until
// released, and a way to hold every claim that found jobs in flight.
type fetchRig struct {
	t      *testing.T
	db     *pgtest.DB
	client *pgqueue.Client
	app    string
	mu     sync.Mutex
	gates  map[int]chan struct{}
	// done, once the test ends, lets every handler through.
	done bool
	// holdTx, while open, holds the fence sequence.
	holdTx pgx.Tx
}

// newFetchRig starts the rig's worker. quickPerJob, when not zero, is the
// claim time per job under which its helper loop claims beside the lead
// (worker.SetHelperMaxPerJob).
func newFetchRig(t *testing.T, fetchLimit, concurrency int, quickPerJob time.Duration) *fetchRig {
	db := pgtest.New(t)
	app := strings.NewReplacer("/", "-", " ", "-").Replace(t.Name())
	r := &fetchRig{t: t, db: db, app: app, gates: map[int]chan struct{}{}}
	r.client = pgqueue.New(pgtest.AppPool(t, db, app, 8), pgqueue.Config{PollOnly: true})
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error {
		<-r.gate(job.Args.N)
		return nil
	})
	w, err := worker.New(r.client, reg, worker.Config{
		Queues: map[string]int{"default": concurrency}, FetchLimit: fetchLimit, Fetchers: 2,
		PollInterval: 20 * time.Millisecond, DisableMaintenance: true, Logger: quietLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	if quickPerJob > 0 {
		worker.SetHelperMaxPerJob(w, quickPerJob)
	}
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		w.Stop(ctx)
	})
	// Registered after the Stop above, so it runs first: Stop waits for
	// the claims and the handlers.
	t.Cleanup(func() {
		r.release()
		r.mu.Lock()
		r.done = true
		for _, g := range r.gates {
			select {
			case <-g:
			default:
				close(g)
			}
		}
		r.mu.Unlock()
	})
	return r
}

// gate is the channel the handlers of wave n wait on.
func (r *fetchRig) gate(n int) chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	g := r.gates[n]
	if g == nil {
		g = make(chan struct{})
		if r.done {
			close(g)
		}
		r.gates[n] = g
	}
	return g
}

// enqueue adds n jobs of wave.
func (r *fetchRig) enqueue(wave, n int) {
	r.t.Helper()
	ps := make([]queue.EnqueueParams, n)
	for i := range ps {
		ps[i] = queue.EnqueueParams{Kind: "effect", Args: []byte(fmt.Sprintf(`{"n":%d}`, wave))}
	}
	if _, err := r.client.EnqueueMany(context.Background(), ps); err != nil {
		r.t.Fatal(err)
	}
}

// running waits until n jobs run.
func (r *fetchRig) running(n int) {
	r.t.Helper()
	testwatch.WaitFor(r.t, 10*time.Second, "running jobs", func() bool {
		var got int
		err := r.db.Pool.QueryRow(context.Background(), "SELECT count(*) FROM jobfence_jobs WHERE state = 'running'").Scan(&got)
		if err != nil {
			r.t.Fatal(err)
		}
		return got == n
	})
}

// hold makes every claim that finds jobs wait, holding their rows, until
// release.
func (r *fetchRig) hold() {
	r.t.Helper()
	tx, err := r.db.Pool.Begin(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := tx.Exec(context.Background(), "ALTER SEQUENCE jobfence_fence_seq INCREMENT BY 1"); err != nil {
		r.t.Fatal(err)
	}
	r.holdTx = tx
}

func (r *fetchRig) release() {
	if r.holdTx != nil {
		r.holdTx.Rollback(context.Background())
		r.holdTx = nil
	}
}

func (r *fetchRig) waitingClaims() int {
	r.t.Helper()
	var n int
	if err := r.db.Pool.QueryRow(context.Background(), waitingClaimsSQL, r.app).Scan(&n); err != nil {
		r.t.Fatal(err)
	}
	return n
}

// TestHelperFetcherIdleWhileClaimsAreSlow is a fleet instance's regime:
// claims are slow (here the first waits for its fence), because many run
// at once. Slots free up while the lead loop's next claim is in flight,
// and jobs are ready, but the second loop must not claim beside it: every
// concurrent claim makes the others skip its locked rows.
func TestHelperFetcherIdleWhileClaimsAreSlow(t *testing.T) {
	r := newFetchRig(t, 1000, 100, 0)
	r.hold()
	r.enqueue(1, 40)
	testwatch.WaitFor(t, 10*time.Second, "the first claim to wait", func() bool { return r.waitingClaims() == 1 })
	time.Sleep(100 * time.Millisecond)
	r.release()
	r.running(40)
	r.hold()
	r.enqueue(2, 100)
	// The lead claims the 60 free slots' worth and waits for its fence.
	testwatch.WaitFor(t, 10*time.Second, "the lead loop's claim to wait", func() bool { return r.waitingClaims() == 1 })
	// Wave 1 ends: 40 slots free while 40 jobs are still ready.
	close(r.gate(1))
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if n := r.waitingClaims(); n != 1 {
			t.Fatalf("%d claims in flight at once, want 1: the second loop claimed although the last claim was slow", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHelperFetcherOverlapsQuickClaims is a worker that one loop cannot
// keep busy: claims of FetchLimit jobs come back quickly, so the second
// loop claims while the first one's claim is in flight.
func TestHelperFetcherOverlapsQuickClaims(t *testing.T) {
	// Every claim counts as quick, whatever the machine's load.
	r := newFetchRig(t, 1000, 2000, time.Second)
	r.enqueue(1, 4000)
	r.running(2000)
	r.hold()
	// 2,000 slots free; each loop claims FetchLimit (1,000) jobs and
	// waits for its fence.
	close(r.gate(1))
	testwatch.WaitFor(t, 10*time.Second, "both loops' claims to wait", func() bool { return r.waitingClaims() == 2 })
}
