// Package durable is the durable-steps scenario: an order is one durable
// job of three steps, charge, reserve and ship, with a durable sleep
// before ship (the warehouse's pickup). A worker process runs charge and
// is killed (SIGKILL) before reserve; a second worker process rescues the
// job, replays charge from its record without charging again, runs
// reserve and is paused (SIGSTOP) before the sleep, past its 1s lease.
// The fleet's other instances rescue the job, replay charge and reserve,
// sleep without holding a worker, and run ship. When the paused process
// resumes, its handler, cancelled because its lease ran out, stops before
// any other step, and its attempt commits nothing. Each step's effect
// happened once, by the attempt that recorded it, and each later step saw
// the results of the earlier ones.
package durable

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/examples/scenario"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// Queue is the queue of the scenario's job, and the argument of its
// worker processes (see RunChild).
const Queue = "durable-steps"

// Order is the scenario's durable job: charge, reserve and ship an order.
type Order struct {
	Order int `json:"order"`
}

// Kind implements queue.Args.
func (Order) Kind() string { return "durable_order" }

// Steps are the job's steps, in order.
var Steps = []string{"charge", "reserve", "ship"}

// pickup is the durable sleep before ship.
const pickup = 500 * time.Millisecond

const (
	// Each step's effect is a row of its own, written by the step's
	// function in a statement of its own, as a call to a payment
	// provider or a warehouse would be: not in the step's record.
	createEffectsSQL = `CREATE TABLE IF NOT EXISTS durable_effects (job_id bigint NOT NULL, step text NOT NULL, fence bigint NOT NULL, seen text NOT NULL)`
	insertEffectSQL  = `INSERT INTO durable_effects (job_id, step, fence, seen) VALUES ($1, $2, $3, $4)`
)

// Register adds the order's handler to reg. Its steps write their effects
// with pool and record what they did as "<step> by <by>-<fence> after
// <the previous step's result>";
// after each step that its attempt ran (rather than replayed), it calls
// hold, which the scenario's worker processes wait in (nil: no wait).
// replayed counts the steps that returned their recorded result.
func Register(reg *worker.Registry, pool *pgxpool.Pool, by string, replayed *atomic.Int64, hold func(ctx context.Context, job *queue.Job, step string) error) {
	worker.Add(reg, func(ctx context.Context, job *worker.Job[Order]) error {
		out := map[string]string{}
		prev := "order"
		for _, step := range Steps {
			if step == "ship" {
				// Ends this attempt without spending it (the handler
				// returns the error), and resumes the job after pickup,
				// its steps before replayed.
				if err := worker.Sleep(ctx, pickup); err != nil {
					return err
				}
			}
			ran := false
			did, err := worker.Step(ctx, step, func(ctx context.Context) (string, error) {
				ran = true
				did := fmt.Sprintf("%s by %s-%d after %s", step, by, job.Fence, prev)
				_, err := pool.Exec(ctx, insertEffectSQL, job.ID, step, job.Fence, prev)
				return did, err
			})
			if err != nil {
				return err
			}
			if !ran && replayed != nil {
				replayed.Add(1)
			}
			out[step], prev = did, did
			if ran && hold != nil {
				if err := hold(ctx, job.Job, step); err != nil {
					return err
				}
			}
		}
		return worker.RecordOutput(ctx, out)
	})
}

// RunChild is the scenario's worker process, on queue q: a worker with a
// 1s lease that rescues expired leases. After the first step that its
// attempt runs, its handler prints "started <job id> <fence>" and waits,
// meanwhile the scenario kills or pauses the process, until its context
// ends (a line on stdin lets it go on). It ends with "outcome
// completed=N stale=N lost=N".
func RunChild(ctx context.Context, q string, stdout io.Writer) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return fmt.Errorf("worker process of queue %q: DATABASE_URL is not set", q)
	}
	p, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer p.Close()
	log := slog.New(slog.DiscardHandler)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(os.Stdin)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	reg := worker.NewRegistry()
	Register(reg, p, "worker", nil, func(ctx context.Context, job *queue.Job, step string) error {
		fmt.Fprintf(stdout, "started %d %d\n", job.ID, job.Fence)
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-lines:
			return nil
		}
	})
	w, err := worker.New(pgqueue.New(p, pgqueue.Config{Logger: log}), reg, worker.Config{
		ID: fmt.Sprintf("%s-%d", q, os.Getpid()), Queues: map[string]int{q: 1}, Lease: time.Second,
		PollInterval: 100 * time.Millisecond, PromoteInterval: 200 * time.Millisecond, RescueInterval: 200 * time.Millisecond,
		RetryPolicy: worker.ExponentialRetry{Max: 100 * time.Millisecond}, Logger: log,
	})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	err = scenario.WaitUntil(ctx, 2*time.Minute, "the job's outcome", func() (bool, error) {
		s := w.Stats()
		return s.Completed+s.Stale+s.Lost+s.Retried > 0, nil
	})
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if serr := w.Stop(stopCtx); err == nil {
		err = serr
	}
	s := w.Stats()
	fmt.Fprintf(stdout, "outcome completed=%d stale=%d lost=%d\n", s.Completed, s.Stale, s.Lost)
	return err
}

// Run plays the scenario on env and measures it.
func Run(ctx context.Context, env *scenario.Env) (scenario.Result, error) {
	var o scenario.Result
	if _, err := env.Pool.Exec(ctx, createEffectsSQL); err != nil {
		return o, err
	}
	c := pgqueue.New(env.Pool, pgqueue.Config{Logger: env.Log()})
	res, err := c.Insert(ctx, Order{Order: 51}, &queue.InsertOpts{Queue: Queue})
	if err != nil {
		return o, err
	}
	started := func(ch *scenario.Child) (int64, error) {
		id, fence, err := ch.Started(ctx)
		if err == nil && id != res.ID {
			err = fmt.Errorf("worker process %d ran job %d, want the order's (%d)", ch.Pid(), id, res.ID)
		}
		return fence, err
	}

	killed, err := scenario.StartChild(ctx, env, Queue)
	if err != nil {
		return o, err
	}
	defer killed.Kill()
	killedFence, err := started(killed)
	if err != nil {
		return o, err
	}
	if err := killed.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return o, err
	}
	_ = killed.Wait() // "signal: killed"
	env.Logf("order job %d: worker process %d ran charge (fence %d) and recorded it; SIGKILL before reserve", res.ID, killed.Pid(), killedFence)

	paused, err := scenario.StartChild(ctx, env, Queue)
	if err != nil {
		return o, err
	}
	defer paused.Kill()
	pausedFence, err := started(paused)
	if err != nil {
		return o, err
	}
	if err := paused.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return o, err
	}
	env.Logf("its 1s lease ran out: worker process %d rescued the job (fence %d), replayed charge without running it, ran reserve; SIGSTOP before the pickup sleep",
		paused.Pid(), pausedFence)

	var replayed atomic.Int64
	stop, err := fleet(ctx, env, 2, &replayed)
	if err != nil {
		return o, err
	}
	defer stop()
	var job *queue.Job
	if err := scenario.WaitUntil(ctx, 2*time.Minute, "the order job's completion", func() (bool, error) {
		job, err = c.Get(ctx, res.ID)
		return err == nil && job.State == queue.StateCompleted, err
	}); err != nil {
		return o, err
	}
	env.Logf("that lease ran out too: the fleet rescued the job, replayed charge and reserve, slept %s holding no worker, and ran ship (fence %d)", pickup, job.Fence)
	if err := paused.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return o, err
	}
	co, err := paused.Outcome(ctx)
	if err != nil {
		return o, err
	}
	if err := paused.Wait(); err != nil {
		return o, fmt.Errorf("worker process: %w", err)
	}
	env.Logf("SIGCONT: the paused process's handler, its lease run out, was cancelled before its next step: committed %d, lost %d, refused as stale %d", co.Completed, co.Lost, co.Stale)
	stop()
	if job, err = c.Get(ctx, res.ID); err != nil {
		return o, err
	}
	return measure(ctx, env.Pool, job, killedFence, pausedFence, co, replayed.Load())
}

// measure reads back what the order's steps did.
func measure(ctx context.Context, pool *pgxpool.Pool, job *queue.Job, killedFence, pausedFence int64, co scenario.ChildOutcome, replayed int64) (scenario.Result, error) {
	o := scenario.Result{WantEffects: int64(len(Steps)), Attempted: int64(len(job.AttemptedBy)), Rejected: replayed}
	// What each step did, and which attempt should have done it.
	charge := fmt.Sprintf("charge by worker-%d after order", killedFence)
	reserve := fmt.Sprintf("reserve by worker-%d after %s", pausedFence, charge)
	ship := fmt.Sprintf("ship by rescuer-%d after %s", job.Fence, reserve)
	want := map[string]struct {
		fence int64
		seen  string
	}{"charge": {killedFence, "order"}, "reserve": {pausedFence, charge}, "ship": {job.Fence, reserve}}

	rows, err := pool.Query(ctx, `SELECT step, fence, seen FROM durable_effects WHERE job_id = $1`, job.ID)
	if err != nil {
		return o, err
	}
	effects := map[string][]string{}
	for rows.Next() {
		var step, seen string
		var fence int64
		if err := rows.Scan(&step, &fence, &seen); err != nil {
			rows.Close()
			return o, err
		}
		effects[step] = append(effects[step], fmt.Sprintf("fence %d after %q", fence, seen))
		o.Effects++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return o, err
	}
	recorded := map[string]int64{}
	rows, err = pool.Query(ctx, `SELECT name, fence FROM jobfence_steps WHERE job_id = $1 AND name NOT LIKE 'jobfence:%'`, job.ID)
	if err != nil {
		return o, err
	}
	for rows.Next() {
		var name string
		var fence int64
		if err := rows.Scan(&name, &fence); err != nil {
			rows.Close()
			return o, err
		}
		recorded[name] = fence
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return o, err
	}
	for _, step := range Steps {
		w := want[step]
		if got, once := effects[step], fmt.Sprintf("fence %d after %q", w.fence, w.seen); len(got) != 1 || got[0] != once {
			o.Problems = append(o.Problems, fmt.Sprintf("%s took effect %d times (%v), want once, %s", step, len(got), got, once))
		}
		if recorded[step] != w.fence {
			o.Problems = append(o.Problems, fmt.Sprintf("%s recorded under fence %d, want %d", step, recorded[step], w.fence))
		}
	}
	if len(recorded) != len(Steps) {
		o.Problems = append(o.Problems, fmt.Sprintf("%d steps recorded, want %d", len(recorded), len(Steps)))
	}
	var out map[string]string
	if err := json.Unmarshal(job.Output, &out); err != nil || out["charge"] != charge || out["reserve"] != reserve || out["ship"] != ship {
		o.Problems = append(o.Problems, fmt.Sprintf("the job's output is %s, want charge, reserve and ship as recorded (%v)", job.Output, err))
	}
	if co.Completed != 0 || co.Lost+co.Stale == 0 {
		o.Problems = append(o.Problems, fmt.Sprintf("paused process: committed %d, lost or refused %d; want 0 and 1", co.Completed, co.Lost+co.Stale))
	}
	if replayed == 0 {
		o.Problems = append(o.Problems, "the fleet replayed no step")
	}
	return o, nil
}

// fleet starts n instances running the order's job, each with its own
// pool, rescuing expired leases often; stop stops them (again: nothing).
func fleet(ctx context.Context, env *scenario.Env, n int, replayed *atomic.Int64) (stop func(), err error) {
	var ws []*worker.Worker
	var pools []*pgxpool.Pool
	stop = sync.OnceFunc(func() {
		for _, w := range ws {
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			w.Stop(stopCtx)
			cancel()
		}
		for _, p := range pools {
			p.Close()
		}
	})
	for i := range n {
		pool, err := env.NewPool(ctx, 4)
		if err != nil {
			stop()
			return nil, err
		}
		pools = append(pools, pool)
		reg := worker.NewRegistry()
		Register(reg, pool, "rescuer", replayed, nil)
		w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: env.Log()}), reg, worker.Config{
			ID: fmt.Sprintf("%s-%d", Queue, i+1), Queues: map[string]int{Queue: 4}, Lease: 5 * time.Second,
			RescueInterval: 200 * time.Millisecond, PollInterval: 100 * time.Millisecond, PromoteInterval: 100 * time.Millisecond,
			RetryPolicy: worker.ExponentialRetry{Max: 100 * time.Millisecond}, Logger: env.Log(),
		})
		if err == nil {
			err = w.Start(ctx)
		}
		if err != nil {
			stop()
			return nil, err
		}
		ws = append(ws, w)
	}
	return stop, nil
}
