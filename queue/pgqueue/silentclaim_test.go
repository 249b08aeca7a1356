package pgqueue_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/netfault"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestSilentClaimer: a claimer that stops reading while its claim of 1,000
// jobs with 4 kB of args each is in flight (the server's replies held by a
// proxy, as for a SIGSTOPped process, a paused VM or a full socket buffer)
// holds up no other claimer: another claims within a second, the silent
// one's jobs are claimable again once their lease expires and the rescuer
// and promoter return them, and no job is handed out twice under one fence. Directly
// and through PgBouncer, whose server connection blocks the same way once
// its client stops reading.
func TestSilentClaimer(t *testing.T) {
	t.Run("direct", func(t *testing.T) {
		db := pgtest.New(t)
		silentClaimer(t, db, &pgtest.DB{URL: pgtest.AppURL(t, db, "silent")})
	})
	t.Run("pgbouncer", func(t *testing.T) {
		b := pgtest.NewBounced(t, pgtest.BouncedOptions{})
		silentClaimer(t, b.DB, &pgtest.DB{URL: pgtest.AppURL(t, &pgtest.DB{URL: b.BouncedURL}, "silent")})
	})
}

// silentClaimer runs TestSilentClaimer's scenario: db for everything but
// the silent claimer, which connects to via's server through a proxy.
func silentClaimer(t *testing.T, db, via *pgtest.DB) {
	const jobs, lease = 2000, 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	args := []byte(fmt.Sprintf(`{"pad": %q}`, strings.Repeat("x", 4096)))
	ps := make([]queue.EnqueueParams, jobs)
	for i := range ps {
		ps[i] = queue.EnqueueParams{Kind: "k", Args: args}
	}
	if _, err := c.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}

	goSilent(ctx, t, via, 1000, lease)
	// The silent claim reached the server: its session blocks sending
	// rows, or its claim committed and nobody reads the reply.
	testwatch.WaitFor(t, 30*time.Second, "the silent claim to reach the server", func() bool {
		var n int
		err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'ClientWrite' AND query LIKE '%jobfence_jobs%')
			+ (SELECT count(*) FROM jobfence_jobs WHERE 'silent' = ANY(attempted_by))`).Scan(&n)
		return err == nil && n > 0
	})

	seen := map[int64]int64{} // job → the fence it was claimed under
	take := func(got []*queue.Job) {
		t.Helper()
		fences := map[int64]bool{}
		for _, j := range got {
			if f, ok := seen[j.ID]; ok && f == j.Fence {
				t.Fatalf("job %d claimed twice under fence %d", j.ID, f)
			}
			seen[j.ID] = j.Fence
			fences[j.Fence] = true
		}
		if len(fences) > 1 {
			t.Fatalf("one claim's jobs carry %d fences, want one", len(fences))
		}
	}
	// A claim of a few jobs, so that the second measures a wait on the
	// silent claimer, not the read of 4 MB of jobs (which, under the race
	// detector on a loaded machine, takes about that long by itself).
	// Up to three tries, each bounded at a second: the claimer stays
	// silent throughout, so a claim that waited on it would miss every
	// one, while a load spike on a busy machine misses one at most.
	var got []*queue.Job
	var err error
	for range 3 {
		claimCtx, claimCancel := context.WithTimeout(ctx, time.Second)
		// The silent claim's lease: a try cut off after its claim
		// committed leaves jobs that come back with the silent ones.
		got, err = c.Claim(claimCtx, queue.ClaimParams{Queue: "default", Limit: 10, Lease: lease, WorkerID: "other"})
		claimCancel()
		if err == nil && len(got) > 0 {
			break
		}
	}
	if err != nil || len(got) == 0 {
		t.Fatalf("another claimer got %d jobs within 1 s of the silent claim, three times (err %v), want some", len(got), err)
	}
	take(got)

	// Once the silent claim's lease has expired, the rescuer returns its
	// jobs and they are claimed again.
	deadline := time.Now().Add(lease + 20*time.Second)
	for len(seen) < jobs && time.Now().Before(deadline) {
		if _, err := c.Rescue(ctx, queue.RescueParams{Limit: 1000}); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Promote(ctx, 1000); err != nil {
			t.Fatal(err)
		}
		got := claim(t, c, "default", 1000, time.Minute)
		take(got)
		if len(got) == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if len(seen) != jobs {
		t.Fatalf("%d of %d jobs claimed by the live claimer %v after the silent claim's lease of %v, want all", len(seen), jobs, lease+20*time.Second, lease)
	}
}

// goSilent starts a claim of up to limit jobs of the default queue by a
// claimer, on via's server, that stops reading once its claim is sent: a
// proxy holds every reply from then on. It returns at once; the claim
// ends, unanswered, when the test does.
func goSilent(ctx context.Context, t *testing.T, via *pgtest.DB, limit int, lease time.Duration) {
	t.Helper()
	proxy := netfault.New(t, netfault.TargetOf(t, via.URL), netfault.Forward)
	pool := via.NewPoolVia(t, proxy.Addr(), 1)
	silent := pgqueue.New(pool, pgqueue.Config{})
	// Connected, and its statements prepared, before it goes silent: it
	// stops reading in the middle of a claim, not before one.
	if _, err := silent.Claim(ctx, queue.ClaimParams{Queue: "empty", Limit: 1, Lease: lease, WorkerID: "silent"}); err != nil {
		t.Fatal(err)
	}
	proxy.SetMode(netfault.StallReplies)
	silentCtx, stopSilent := context.WithCancel(ctx)
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	t.Cleanup(proxy.Close)
	t.Cleanup(stopSilent)
	wg.Go(func() {
		// It never returns before the proxy closes: nothing comes back.
		_, _ = silent.Claim(silentCtx, queue.ClaimParams{Queue: "default", Limit: limit, Lease: lease, WorkerID: "silent"})
	})
}
