package worker_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testchild"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// limitsChildEnv makes the test binary play one worker of
// TestLimitsUnderFaults' fleet.
const limitsChildEnv = "JOBFENCE_LIMITS_FAULT_CHILD"

// limitsFaultLongEnv runs TestLimitsUnderFaults' long version (100
// partitions, more jobs, more faults).
const limitsFaultLongEnv = "JOBFENCE_LIMITS_FAULT_LONG"

// limArgs is a job of TestLimitsUnderFaults: N-th of its partition Part.
type limArgs struct {
	Part string `json:"part"`
	N    int    `json:"n"`
}

func (limArgs) Kind() string { return "lim" }

// The limits of TestLimitsUnderFaults.
const (
	faultLease      = time.Second
	faultGlobal     = 4
	faultPerPart    = 2
	faultRate       = 5
	faultRatePeriod = 500 * time.Millisecond
)

// TestLimitsUnderFaults: a fleet of worker processes runs jobs under a
// global concurrency limit, a limit per partition, a rate limit and
// sequences, while its members are frozen (SIGSTOP) past their lease and
// killed (SIGKILL) and replaced. Sampled every 50 ms, no partition ever
// has more live-leased running jobs than its limit; no window of the rate's
// period holds more starts than the rate; every job completes, its effect
// (written in the transaction of its fenced completion) once; and the
// jobs of each sequence take effect strictly in insert order. The short
// version runs in make test; JOBFENCE_LIMITS_FAULT_LONG=1 runs the long
// one (100 partitions).
func TestLimitsUnderFaults(t *testing.T) {
	long := os.Getenv(limitsFaultLongEnv) != ""
	parts, perPart, globalJobs, rateJobs, seqKeys, perSeq, fleet := 30, 3, 60, 60, 5, 8, 4
	if long {
		parts, perPart, globalJobs, rateJobs, seqKeys, perSeq, fleet = 100, 10, 600, 150, 20, 25, 6
	}
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	for _, sql := range []string{
		`CREATE TABLE lim_effects (job_id bigint NOT NULL, fence bigint NOT NULL, q text NOT NULL, part text NOT NULL, n int NOT NULL,
			at timestamptz NOT NULL DEFAULT clock_timestamp())`,
		// Every start, as the claim records it: a frozen or killed
		// worker's starts count too.
		`CREATE TABLE lim_starts (job_id bigint NOT NULL, q text NOT NULL, at timestamptz NOT NULL)`,
		`CREATE FUNCTION lim_start() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.state = 'running' AND OLD.state <> 'running' THEN
				INSERT INTO lim_starts VALUES (NEW.id, NEW.queue, NEW.attempted_at);
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER lim_start AFTER UPDATE ON jobfence_jobs FOR EACH ROW EXECUTE FUNCTION lim_start()`,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	for _, l := range []pgqueue.Limit{
		{Name: "global", Queue: "g", Concurrency: faultGlobal},
		{Name: "per-part", Queue: "p", PartitionBy: []string{"part"}, Concurrency: faultPerPart},
		{Name: "rate", Queue: "r", Rate: faultRate, Period: faultRatePeriod},
		{Name: "seq", Queue: "s", Sequence: true},
	} {
		if err := c.SetLimit(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	var ps []queue.EnqueueParams
	add := func(q, part string, n int, key string) {
		p, err := queue.Params(limArgs{Part: part, N: n}, &queue.InsertOpts{Queue: q, LimitKey: key, MaxAttempts: 100})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	for i := range globalJobs {
		add("g", "", i, "")
	}
	for n := range perPart {
		for p := range parts {
			add("p", fmt.Sprintf("p%d", p), n, "")
		}
	}
	for i := range rateJobs {
		add("r", "", i, "")
	}
	for n := range perSeq {
		for k := range seqKeys {
			add("s", fmt.Sprintf("k%d", k), n, fmt.Sprintf("k%d", k))
		}
	}
	if _, err := c.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	total := len(ps)

	// The fleet.
	var mu sync.Mutex
	children := make([]*testchild.Child, fleet)
	start := func(i int) {
		ch := testchild.Start(t, limitsChildEnv, "DATABASE_URL="+db.URL)
		if l := ch.Next(t); l != "READY" {
			t.Fatalf("child: %q (stderr %s)", l, ch.Stderr())
		}
		mu.Lock()
		children[i] = ch
		mu.Unlock()
	}
	for i := range fleet {
		start(i)
	}

	// The sampler.
	var violations []string
	samples := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			rows, err := db.Pool.Query(ctx, `
				SELECT j.limit_name, j.limit_part, count(*), l.concurrency
				FROM jobfence_jobs j JOIN jobfence_limits l ON l.name = j.limit_name
				WHERE j.state = 'running' AND j.attempted_at IS NOT NULL AND j.lease_expires_at > now()
				GROUP BY 1, 2, 4
				HAVING count(*) > l.concurrency`)
			if err != nil {
				continue // the database is busy; the next sample goes on
			}
			for rows.Next() {
				var name, part string
				var n, limit int
				if rows.Scan(&name, &part, &n, &limit) == nil {
					violations = append(violations, fmt.Sprintf("%s/%s: %d running with live leases, limit %d", name, part, n, limit))
				}
			}
			if rows.Err() == nil {
				samples++
			}
			rows.Close()
		}
	}()

	// The faults: a member frozen past its lease, then continued, and one
	// killed and replaced, in turn. (The rate queue's jobs take 6 s at
	// least, time for a few of each.)
	wg.Add(1)
	var faultsMu sync.Mutex
	faults := map[string]int{}
	go func() {
		defer wg.Done()
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			i := rand.N(fleet)
			mu.Lock()
			ch := children[i]
			mu.Unlock()
			if k%2 == 1 {
				ch.Signal(t, syscall.SIGKILL)
				_ = ch.Wait()
				faultsMu.Lock()
				faults["killed"]++
				faultsMu.Unlock()
				start(i)
				continue
			}
			ch.Signal(t, syscall.SIGSTOP)
			faultsMu.Lock()
			faults["frozen"]++
			faultsMu.Unlock()
			select {
			case <-stop:
			case <-time.After(faultLease + 700*time.Millisecond):
			}
			ch.Signal(t, syscall.SIGCONT)
		}
	}()

	testwatch.WaitFor(t, 5*time.Minute, "every job completed, past members both frozen and killed", func() bool {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE state = 'completed'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		faultsMu.Lock()
		defer faultsMu.Unlock()
		return n == total && faults["frozen"] > 0 && faults["killed"] > 0
	})
	close(stop)
	wg.Wait()
	t.Logf("%d jobs, %d samples, faults %v", total, samples, faults)
	if len(violations) > 0 {
		t.Fatalf("%d samples over a limit, the first: %v", len(violations), violations[:min(5, len(violations))])
	}
	if samples < 10 {
		t.Fatalf("only %d samples were taken", samples)
	}
	if faults["frozen"] == 0 || faults["killed"] == 0 {
		t.Fatalf("faults %v: want members both frozen and killed", faults)
	}
	// Each job's effect once, by the claim that completed it.
	var effects, distinct, wrong int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(DISTINCT e.job_id), count(*) FILTER (WHERE e.fence <> j.fence)
		FROM lim_effects e JOIN jobfence_jobs j ON j.id = e.job_id`).Scan(&effects, &distinct, &wrong); err != nil {
		t.Fatal(err)
	}
	if effects != total || distinct != total || wrong != 0 {
		t.Fatalf("effects: %d rows for %d jobs (%d by a stale fence), want one per each of %d", effects, distinct, wrong, total)
	}
	// No rate window over the rate, by the starts the claims recorded.
	var starts []time.Time
	rows, err := db.Pool.Query(ctx, `SELECT at FROM lim_starts WHERE q = 'r' ORDER BY at`)
	if err != nil {
		t.Fatal(err)
	}
	starts, err = pgx.CollectRows(rows, pgx.RowTo[time.Time])
	if err != nil {
		t.Fatal(err)
	}
	if len(starts) < rateJobs {
		t.Fatalf("%d starts recorded for %d rate-limited jobs", len(starts), rateJobs)
	}
	for i := faultRate; i < len(starts); i++ {
		if d := starts[i].Sub(starts[i-faultRate]); d < faultRatePeriod {
			t.Fatalf("starts %d to %d of the rate-limited queue within %v: more than %d in a period of %v", i-faultRate, i, d, faultRate, faultRatePeriod)
		}
	}
	// Sequences strictly in order: by the time their effects committed.
	rows, err = db.Pool.Query(ctx, `SELECT part, n FROM lim_effects WHERE q = 's' ORDER BY part, at`)
	if err != nil {
		t.Fatal(err)
	}
	type pn struct {
		Part string
		N    int
	}
	seq, err := pgx.CollectRows(rows, pgx.RowToStructByPos[pn])
	if err != nil {
		t.Fatal(err)
	}
	byKey := map[string][]int{}
	for _, e := range seq {
		byKey[e.Part] = append(byKey[e.Part], e.N)
	}
	for k, ns := range byKey {
		if !slices.IsSorted(ns) || len(ns) != perSeq {
			t.Fatalf("sequence %s took effect in the order %v, want 0..%d", k, ns, perSeq-1)
		}
	}
}

// limitsChild is one worker of TestLimitsUnderFaults' fleet, run in a
// child process (see TestMain): it works the four queues until killed, or
// until its standard input closes.
func limitsChild() int {
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	cfg.MaxConns = 16
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[limArgs]) error {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Duration(10+rand.N(40)) * time.Millisecond):
		}
		_, err := tx.Exec(ctx, `INSERT INTO lim_effects (job_id, fence, q, part, n) VALUES ($1, $2, $3, $4, $5)`,
			job.ID, job.Fence, job.Queue, job.Args.Part, job.Args.N)
		return err
	})
	w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: quietLogger()}), reg, worker.Config{
		Queues: map[string]int{"g": 3, "p": 3, "r": 3, "s": 3}, Lease: faultLease,
		PollInterval: 100 * time.Millisecond, PromoteInterval: 200 * time.Millisecond, RescueInterval: 250 * time.Millisecond,
		RetryPolicy: worker.ExponentialRetry{Max: 50 * time.Millisecond}, Logger: quietLogger(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("READY")
	// Until the parent closes stdin (or kills this process).
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w.Stop(stopCtx)
	return 0
}
