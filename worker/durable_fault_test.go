package worker_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testchild"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// durFaultChildEnv makes the test binary play one worker of
// TestDurableStepsUnderFaults' fleet.
const durFaultChildEnv = "JOBFENCE_DURABLE_FAULT_CHILD"

// durFaultLongEnv runs TestDurableStepsUnderFaults' long version (more
// jobs, more faults).
const durFaultLongEnv = "JOBFENCE_DURABLE_FAULT_LONG"

// durFaultLease is the fleet's lease: a frozen member is continued past
// it, a killed member's jobs are rescued after it.
const durFaultLease = 2 * time.Second

// durArgs is a job of TestDurableStepsUnderFaults: Steps steps, with a
// durable sleep of SleepMS before the second, or a wait for signal "go"
// (whose payload is N) before the third.
type durArgs struct {
	N       int  `json:"n"`
	Steps   int  `json:"steps"`
	SleepMS int  `json:"sleep_ms,omitempty"`
	Await   bool `json:"await,omitempty"`
}

func (durArgs) Kind() string { return "durfault" }

// durEffectSQL is a step's effect, $1 job, $2 step (its recorded name), $3
// its index, $4 the running attempt's fence, $5 the worker process: a row
// keyed by (job, step) whose count each run adds one to, in its own
// statement, as an outside call would be (not in the record's
// transaction). The same statement logs the run, with what its snapshot
// saw: whether the attempt still held the job (held) and whether the
// step was recorded already (recorded), so that the test can tell a run
// the guarantee allows from one it does not.
const durEffectSQL = `
WITH s AS (
    SELECT EXISTS (SELECT FROM jobfence_jobs WHERE id = $1 AND fence = $4 AND state = 'running') AS held,
           EXISTS (SELECT FROM jobfence_steps WHERE job_id = $1 AND name = $2) AS recorded
), r AS (
    INSERT INTO durf_runs (job_id, step, idx, fence, pid, held, recorded)
    SELECT $1, $2, $3, $4, $5, held, recorded FROM s
)
INSERT INTO durf_effects (job_id, step, n) VALUES ($1, $2, 1)
ON CONFLICT (job_id, step) DO UPDATE SET n = durf_effects.n + 1`

// durStepKey is the name the n-th (from 0) call of Step "step" records.
func durStepKey(i int) string {
	if i == 0 {
		return "step"
	}
	return fmt.Sprintf("step#%d", i+1)
}

// durHandler is the fleet's handler: its steps, each an effect between
// two short pauses (a kill or a freeze in the second is one between a
// step's effect and its record), with a durable sleep or a signal wait
// among them; its output is the fence each step's result came from.
func durHandler(pool *pgxpool.Pool, pid int) func(ctx context.Context, job *worker.Job[durArgs]) error {
	pause := func(ctx context.Context) error {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(time.Duration(rand.N(15)) * time.Millisecond):
			return nil
		}
	}
	return func(ctx context.Context, job *worker.Job[durArgs]) error {
		fences := make([]int64, 0, job.Args.Steps)
		for i := range job.Args.Steps {
			if i == 1 && job.Args.SleepMS > 0 {
				if err := worker.Sleep(ctx, time.Duration(job.Args.SleepMS)*time.Millisecond); err != nil {
					return err
				}
			}
			if i == 2 && job.Args.Await {
				n, err := worker.AwaitSignal[int](ctx, "go", 2*time.Minute)
				if err != nil {
					return err
				}
				if n != job.Args.N {
					return fmt.Errorf("job %d took signal %d, want %d", job.ID, n, job.Args.N)
				}
			}
			key := durStepKey(i)
			f, err := worker.Step(ctx, "step", func(ctx context.Context) (int64, error) {
				if got := worker.StepKey(ctx); got != job.IdempotencyKey()+"/"+key {
					return 0, fmt.Errorf("step %d of job %d has key %q, want the job's and %q", i, job.ID, got, key)
				}
				if err := pause(ctx); err != nil {
					return 0, err
				}
				if _, err := pool.Exec(ctx, durEffectSQL, job.ID, key, i, job.Fence, pid); err != nil {
					return 0, err
				}
				return job.Fence, pause(ctx)
			})
			if err != nil {
				return err
			}
			fences = append(fences, f)
		}
		return worker.RecordOutput(ctx, fences)
	}
}

// TestDurableStepsUnderFaults: a fleet of worker processes runs thousands
// of durable jobs of 3 to 5 steps, a third of them with a durable sleep
// and a third waiting for a signal the test sends (half of them before
// the wait), while its members are killed (SIGKILL) and frozen (SIGSTOP
// past their lease, then SIGCONT) at points spread over the run. Each
// step's effect is a counted row written in a statement of its own,
// outside the step's record, as an outside call would be. It checks what
// Step promises (docs/durable.md, docs/benchmarks/durable-faults.md):
//
//   - every job completes, its output made of the recorded steps' results;
//   - every job recorded each of its steps once, under the fence of the
//     attempt whose run produced the result (the primary key allows one
//     record; the output and fences say it was that run's);
//   - no step's effect is lost: the recording attempt's run took effect;
//   - no attempt that held the job ran a step already recorded (a
//     resumed, rescued or retried attempt replays it);
//   - an effect that happened more than once did so only through an
//     attempt that stopped right there: killed, frozen or cancelled
//     between the effect and its record, it ran no later step and
//     recorded nothing more;
//   - each signal was delivered to its job's wait, once.
//
// The short version runs in make test; JOBFENCE_DURABLE_FAULT_LONG=1
// runs the long one.
func TestDurableStepsUnderFaults(t *testing.T) {
	long := os.Getenv(durFaultLongEnv) != ""
	jobs, fleet, faults := 1000, 4, 12
	if long {
		jobs, faults = 5000, 40
	}
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	for _, sql := range []string{
		`CREATE TABLE durf_effects (job_id bigint NOT NULL, step text NOT NULL, n int NOT NULL, PRIMARY KEY (job_id, step))`,
		`CREATE TABLE durf_runs (job_id bigint NOT NULL, step text NOT NULL, idx int NOT NULL, fence bigint NOT NULL, pid int NOT NULL,
			held bool NOT NULL, recorded bool NOT NULL)`,
		// Every claim, as it happens: a killed or frozen member's too.
		`CREATE TABLE durf_claims (job_id bigint NOT NULL, fence bigint NOT NULL)`,
		`CREATE FUNCTION durf_claim() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN
			IF NEW.state = 'running' AND OLD.state <> 'running' THEN
				INSERT INTO durf_claims VALUES (NEW.id, NEW.fence);
			END IF;
			RETURN NEW;
		END $$`,
		`CREATE TRIGGER durf_claim AFTER UPDATE ON jobfence_jobs FOR EACH ROW EXECUTE FUNCTION durf_claim()`,
	} {
		if _, err := db.Pool.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	ps := make([]queue.EnqueueParams, 0, jobs)
	wantSteps, sleepers, waiters := 0, 0, 0
	for i := range jobs {
		a := durArgs{N: i, Steps: 3 + i%3}
		switch i % 3 {
		case 0:
			a.SleepMS = 100 + rand.N(400)
			sleepers++
		case 1:
			a.Await = true
			waiters++
		}
		wantSteps += a.Steps
		p, err := queue.Params(a, &queue.InsertOpts{Queue: "dur", MaxAttempts: 100})
		if err != nil {
			t.Fatal(err)
		}
		ps = append(ps, p)
	}
	if _, err := c.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	// Half of the signals are sent before their wait, which keeps them.
	var early []int64
	if err := pgxCollect(ctx, db.Pool, &early, `SELECT id FROM jobfence_jobs WHERE (args->>'await')::bool AND (args->>'n')::int % 2 = 0`); err != nil {
		t.Fatal(err)
	}
	signal := func(id int64) {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT (args->>'n')::int FROM jobfence_jobs WHERE id = $1`, id).Scan(&n); err != nil {
			t.Error(err)
			return
		}
		if err := c.Signal(ctx, id, "go", n); err != nil {
			t.Errorf("signal job %d: %v", id, err)
		}
	}
	for _, id := range early {
		signal(id)
	}

	// The fleet.
	var mu sync.Mutex
	children := make([]*testchild.Child, fleet)
	pids := make([]int, fleet)
	start := func(i int) {
		ch := testchild.Start(t, durFaultChildEnv, "DATABASE_URL="+db.URL)
		var pid int
		if l := ch.Next(t); !strings.HasPrefix(l, "READY ") {
			t.Fatalf("child: %q (stderr %s)", l, ch.Stderr())
		} else if _, err := fmt.Sscanf(l, "READY %d", &pid); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		children[i], pids[i] = ch, pid
		mu.Unlock()
	}
	for i := range fleet {
		start(i)
	}
	began := time.Now()

	stop := make(chan struct{})
	var wg sync.WaitGroup
	// The signaller: each waiting job without a signal gets one, once.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			var ids []int64
			if err := pgxCollect(ctx, db.Pool, &ids, `SELECT id FROM jobfence_jobs j WHERE awaiting = 'go'
				AND NOT EXISTS (SELECT FROM jobfence_signals s WHERE s.job_id = j.id)`); err != nil {
				continue // the database is busy: the next pass sends them
			}
			for _, id := range ids {
				signal(id)
			}
		}
	}()

	// The faults, spread over the run by its progress (recorded steps), so
	// that they land mid-run on a fast machine and a slow one alike: in
	// turn, a member frozen past its lease and continued, and one killed
	// and replaced.
	var faultsMu sync.Mutex
	var frozen, killed int
	frozenPids := map[int]bool{}
	faultsDone := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(faultsDone)
		for k := range faults {
			at := wantSteps * (k + 1) / (faults + 2)
			for {
				var n int
				if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_steps WHERE name NOT LIKE 'jobfence:%'`).Scan(&n); err == nil && n >= at {
					break
				}
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
			}
			i := rand.N(fleet)
			mu.Lock()
			ch, pid := children[i], pids[i]
			mu.Unlock()
			if k%2 == 1 {
				ch.Signal(t, syscall.SIGKILL)
				_ = ch.Wait()
				faultsMu.Lock()
				killed++
				faultsMu.Unlock()
				start(i)
				continue
			}
			ch.Signal(t, syscall.SIGSTOP)
			faultsMu.Lock()
			frozen++
			frozenPids[pid] = true
			faultsMu.Unlock()
			select {
			case <-stop:
			case <-time.After(durFaultLease + time.Second):
			}
			ch.Signal(t, syscall.SIGCONT)
		}
	}()

	// Every job completed, after every fault; on timeout, where the jobs
	// stand says what went wrong.
	deadline := time.Now().Add(6 * time.Minute)
	for {
		var done int
		if err := db.Pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM jobfence_jobs WHERE state = 'completed')
			+ (SELECT count(*) FROM jobfence_jobs_finished WHERE state = 'completed')`).Scan(&done); err != nil {
			t.Fatal(err)
		}
		if done == jobs && channelClosed(faultsDone) {
			break
		}
		if time.Now().After(deadline) {
			var states []string
			_ = pgxCollect(ctx, db.Pool, &states, `SELECT state || coalesce(' awaiting ' || awaiting, '') || ': ' || count(*)
				FROM jobfence_jobs WHERE state <> 'completed' GROUP BY state, awaiting`)
			t.Fatalf("after 6 minutes, %d of %d jobs completed (the others: %v), faults done: %v", done, jobs, states, channelClosed(faultsDone))
		}
		time.Sleep(100 * time.Millisecond) // a poll of the database, bounded by the deadline above
	}
	took := time.Since(began)
	close(stop)
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}

	// Every job's output is its recorded steps' results, in order, each
	// the fence of the attempt that recorded it.
	rows, err := db.Pool.Query(ctx, `
		SELECT j.id, j.args, j.output, coalesce((SELECT jsonb_agg(s.fence ORDER BY length(s.name), s.name) FROM jobfence_steps s
			WHERE s.job_id = j.id AND s.name NOT LIKE 'jobfence:%'), '[]'), j.attempt
		FROM (SELECT id, args, output, attempt FROM jobfence_jobs UNION ALL SELECT id, args, output, attempt FROM jobfence_jobs_finished) j`)
	if err != nil {
		t.Fatal(err)
	}
	bad, seen, attempts := 0, 0, 0
	for rows.Next() {
		var id int64
		var args durArgs
		var out, recorded []int64
		var attempt int
		if err := rows.Scan(&id, &args, &out, &recorded, &attempt); err != nil {
			t.Fatal(err)
		}
		seen++
		attempts += attempt
		if len(recorded) != args.Steps || !slices.Equal(out, recorded) {
			if bad++; bad <= 5 {
				t.Errorf("job %d (%d steps): output %v, recorded steps' fences %v", id, args.Steps, out, recorded)
			}
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if seen != jobs || bad > 0 {
		t.Fatalf("%d jobs read back of %d, %d whose output is not their recorded steps", seen, jobs, bad)
	}

	var stats struct {
		steps, lost, liveRerun, badDup, dups, runs, stale, staleAfter, staleByFrozen, claims, mid int
	}
	for _, q := range []struct {
		v   *int
		sql string
	}{
		{&stats.steps, `SELECT count(*) FROM jobfence_steps WHERE name NOT LIKE 'jobfence:%'`},
		// A recorded step whose recording attempt's run left no effect.
		{&stats.lost, `SELECT count(*) FROM jobfence_steps s WHERE s.name NOT LIKE 'jobfence:%' AND NOT EXISTS (
			SELECT FROM durf_runs r JOIN durf_effects e USING (job_id, step)
			WHERE r.job_id = s.job_id AND r.step = s.name AND r.fence = s.fence AND r.held AND e.n >= 1)`},
		// A run by an attempt that held the job, of a step recorded already.
		{&stats.liveRerun, `SELECT count(*) FROM durf_runs WHERE held AND recorded`},
		// A run that did not produce the record, by an attempt that went
		// on: it ran a later step, or recorded one.
		{&stats.badDup, `SELECT count(*) FROM durf_runs r JOIN jobfence_steps s ON s.job_id = r.job_id AND s.name = r.step
			WHERE r.fence <> s.fence AND EXISTS (
				SELECT FROM durf_runs r2 WHERE r2.job_id = r.job_id AND r2.fence = r.fence AND r2.idx > r.idx)`},
		{&stats.dups, `SELECT coalesce(sum(n - 1), 0) FROM durf_effects`},
		{&stats.runs, `SELECT count(*) FROM durf_runs`},
		{&stats.stale, `SELECT count(*) FROM durf_runs WHERE NOT held`},
		{&stats.staleAfter, `SELECT count(*) FROM durf_runs WHERE NOT held AND recorded`},
		{&stats.claims, `SELECT count(*) FROM durf_claims`},
		// Jobs whose steps ran under more than one claim.
		{&stats.mid, `SELECT count(*) FROM (SELECT job_id FROM durf_runs GROUP BY job_id HAVING count(DISTINCT fence) > 1) m`},
	} {
		if err := db.Pool.QueryRow(ctx, q.sql).Scan(q.v); err != nil {
			t.Fatalf("%s: %v", q.sql, err)
		}
	}
	var stalePids []int
	if err := pgxCollect(ctx, db.Pool, &stalePids, `SELECT pid FROM durf_runs WHERE NOT held`); err != nil {
		t.Fatal(err)
	}
	for _, p := range stalePids {
		if frozenPids[p] {
			stats.staleByFrozen++
		}
	}
	// Signals: one per waiting job, delivered to its wait, which recorded
	// its payload.
	var signals, delivered, waits int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*), count(delivered_at), count(DISTINCT job_id) FROM jobfence_signals`).Scan(&signals, &delivered, &waits); err != nil {
		t.Fatal(err)
	}
	var waitSteps, sleepSteps int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE name = 'jobfence:signal:go' AND output ? 'signal'),
		count(*) FILTER (WHERE name = 'jobfence:sleep') FROM jobfence_steps`).Scan(&waitSteps, &sleepSteps); err != nil {
		t.Fatal(err)
	}

	t.Logf("%d jobs, %d steps recorded, %d sleeps, %d signal waits; %d members frozen, %d killed; %s", jobs, stats.steps, sleepSteps, waitSteps, frozen, killed, took.Round(100*time.Millisecond))
	t.Logf("%d claims (%d attempts spent); %d step runs; %d jobs whose steps ran under more than one claim; %d effects repeated; %d runs by an attempt that had lost the job (%d by a frozen member, %d of them after the step's record)",
		stats.claims, attempts, stats.runs, stats.mid, stats.dups, stats.stale, stats.staleByFrozen, stats.staleAfter)
	if stats.steps != wantSteps {
		t.Errorf("%d steps recorded, want %d", stats.steps, wantSteps)
	}
	if stats.lost != 0 {
		t.Errorf("%d recorded steps whose recording run left no effect", stats.lost)
	}
	if stats.liveRerun != 0 {
		t.Errorf("%d runs of a recorded step by an attempt that held its job: a replay ran the step again", stats.liveRerun)
	}
	if stats.badDup != 0 {
		t.Errorf("%d runs whose record was lost by an attempt that went on to a later step", stats.badDup)
	}
	if signals != waiters || delivered != waiters || waits != waiters || waitSteps != waiters {
		t.Errorf("signals: %d sent, %d delivered, to %d jobs, %d waits recorded one; want %d each", signals, delivered, waits, waitSteps, waiters)
	}
	if sleepSteps != sleepers {
		t.Errorf("%d sleeps recorded, want %d", sleepSteps, sleepers)
	}
	// The faults must have landed mid-run, or the test proved nothing.
	if frozen < faults/2 || killed < faults/2 || stats.mid == 0 || stats.claims <= jobs {
		t.Errorf("%d frozen, %d killed, %d jobs run by more than one claim, %d claims: the faults did not land mid-run", frozen, killed, stats.mid, stats.claims)
	}
}

// channelClosed reports whether c is closed.
func channelClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// pgxCollect runs sql and collects its one column into dst.
func pgxCollect[T any](ctx context.Context, pool *pgxpool.Pool, dst *[]T, sql string) error {
	rows, err := pool.Query(ctx, sql)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var v T
		if err := rows.Scan(&v); err != nil {
			return err
		}
		*dst = append(*dst, v)
	}
	return rows.Err()
}

// durFaultChild is one worker of TestDurableStepsUnderFaults' fleet, run in
// a child process (see TestMain): it works queue dur until killed, or
// until its standard input closes.
func durFaultChild() int {
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
	worker.Add(reg, durHandler(pool, os.Getpid()))
	w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: quietLogger()}), reg, worker.Config{
		Queues: map[string]int{"dur": 10}, Lease: durFaultLease,
		PollInterval: 100 * time.Millisecond, PromoteInterval: 200 * time.Millisecond, RescueInterval: 300 * time.Millisecond,
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
	fmt.Printf("READY %d\n", os.Getpid())
	// Until the parent closes stdin (or kills this process).
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
	}
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	w.Stop(stopCtx)
	return 0
}
