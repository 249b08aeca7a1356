// Package orderflow is the order-workflow scenario: an order is a
// workflow, charge -> reserve and receipt -> ship. The worker process
// that runs charge is paused with SIGSTOP after recording its output and
// before its completion, past its 1s lease. The fleet's other instances
// rescue charge, run it again (its output is theirs), and its completion
// releases reserve and receipt, whose completions release ship. When the
// paused process resumes, its completion is refused as stale: it neither
// overwrites charge's output nor releases anything again. Each later task
// ran once, after charge's one accepted completion, with that attempt's
// output.
package orderflow

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/examples/scenario"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
	"github.com/jobfence/jobfence/workflow"
)

// Queue is the queue of the scenario's tasks, and the argument of its
// worker process (see RunChild).
const Queue = "order-workflow"

// Charge charges an order's card: a call to a payment provider, which
// records the charge's ID as its output.
type Charge struct {
	Order int `json:"order"`
	Cents int `json:"cents"`
}

// Kind implements queue.Args.
func (Charge) Kind() string { return "order_charge" }

// Reserve reserves the order's stock.
type Reserve struct {
	Order int `json:"order"`
}

// Kind implements queue.Args.
func (Reserve) Kind() string { return "order_reserve" }

// Receipt mails the receipt.
type Receipt struct {
	Order int `json:"order"`
}

// Kind implements queue.Args.
func (Receipt) Kind() string { return "order_receipt" }

// Ship ships the order once its stock is reserved and its receipt sent.
type Ship struct {
	Order int `json:"order"`
}

// Kind implements queue.Args.
func (Ship) Kind() string { return "order_ship" }

// ChargeResult is charge's output.
type ChargeResult struct {
	ChargeID string `json:"charge_id"`
}

const (
	createEffectsSQL = `CREATE TABLE IF NOT EXISTS order_effects (task text NOT NULL, job_id bigint NOT NULL, fence bigint NOT NULL, seen text NOT NULL)`
	insertEffectSQL  = `INSERT INTO order_effects (task, job_id, fence, seen) VALUES ($1, $2, $3, $4)`
)

// New builds order's workflow.
func New(order int) *workflow.Workflow {
	in := &queue.InsertOpts{Queue: Queue}
	return workflow.New(fmt.Sprintf("order %d", order)).
		Add("charge", Charge{Order: order, Cents: 4200}, &workflow.TaskOpts{Insert: in}).
		Add("reserve", Reserve{Order: order}, &workflow.TaskOpts{Insert: in, DependsOn: []string{"charge"}}).
		Add("receipt", Receipt{Order: order}, &workflow.TaskOpts{Insert: in, DependsOn: []string{"charge"}}).
		Add("ship", Ship{Order: order}, &workflow.TaskOpts{Insert: in, DependsOn: []string{"reserve", "receipt"}})
}

// Register adds the workflow's handlers to reg. charge, as by, records
// its charge ID; the others record what they read from the tasks they
// depend on in order_effects, in the transaction of their fenced
// completion (worker.AddTx), and output what they did.
func Register(reg *worker.Registry, by string) {
	worker.Add(reg, func(ctx context.Context, job *worker.Job[Charge]) error {
		return worker.RecordOutput(ctx, ChargeResult{ChargeID: fmt.Sprintf("%s-%d", by, job.Fence)})
	})
	effect := func(ctx context.Context, tx pgx.Tx, job *queue.Job, task, seen string) error {
		if _, err := tx.Exec(ctx, insertEffectSQL, task, job.ID, job.Fence, seen); err != nil {
			return err
		}
		return worker.RecordOutput(ctx, task+" after "+seen)
	}
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[Reserve]) error {
		c, err := workflow.Output[ChargeResult](ctx, "charge")
		if err != nil {
			return err
		}
		return effect(ctx, tx, job.Job, "reserve", c.ChargeID)
	})
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[Receipt]) error {
		c, err := workflow.Output[ChargeResult](ctx, "charge")
		if err != nil {
			return err
		}
		return effect(ctx, tx, job.Job, "receipt", c.ChargeID)
	})
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[Ship]) error {
		r, err := workflow.Output[string](ctx, "reserve")
		if err != nil {
			return err
		}
		p, err := workflow.Output[string](ctx, "receipt")
		if err != nil {
			return err
		}
		return effect(ctx, tx, job.Job, "ship", r+" and "+p)
	})
}

// RunChild is the scenario's worker process, on queue q: a worker with a
// 1s lease that runs charge only. Its handler records the charge's output,
// prints "started <job id> <fence>", then waits for a line on stdin
// (meanwhile the scenario pauses the process) and returns, as a handler
// that does not look at its context would. It ends with "outcome
// completed=N stale=N lost=N".
func RunChild(ctx context.Context, q string, stdout io.Writer) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return fmt.Errorf("worker process of queue %q: DATABASE_URL is not set", q)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	log := slog.New(slog.DiscardHandler)
	stdin := bufio.NewReader(os.Stdin)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[Charge]) error {
		if err := worker.RecordOutput(ctx, ChargeResult{ChargeID: fmt.Sprintf("paused-%d", job.Fence)}); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "started %d %d\n", job.ID, job.Fence)
		if _, err := stdin.ReadString('\n'); err != nil {
			return fmt.Errorf("wait for the scenario: %w", err)
		}
		return nil
	})
	w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: log}), reg, worker.Config{
		Queues: map[string]int{q: 1}, Lease: time.Second, PollInterval: 100 * time.Millisecond, DisableMaintenance: true, Logger: log,
	})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	err = scenario.WaitUntil(ctx, 2*time.Minute, "charge's outcome", func() (bool, error) {
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
	const order = 8
	res, err := workflow.Insert(ctx, c, New(order))
	if err != nil {
		return o, err
	}
	ch, err := scenario.StartChild(ctx, env, Queue)
	if err != nil {
		return o, err
	}
	defer ch.Kill()
	jobID, pausedFence, err := ch.Started(ctx)
	if err != nil {
		return o, err
	}
	if jobID != res.Tasks["charge"] {
		return o, fmt.Errorf("the worker process claimed job %d, want charge (%d)", jobID, res.Tasks["charge"])
	}
	if err := ch.Cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return o, err
	}
	env.Logf("workflow %s: worker process %d ran charge (job %d, fence %d) and recorded its output; SIGSTOP before its completion",
		res.ID, ch.Pid(), jobID, pausedFence)
	stop, err := fleet(ctx, env, 2)
	if err != nil {
		return o, err
	}
	defer stop()
	var wf *pgqueue.WorkflowInfo
	if err := scenario.WaitUntil(ctx, 2*time.Minute, "the workflow's tasks to end", func() (bool, error) {
		wf, err = c.Workflow(ctx, res.ID)
		return err == nil && wf.Done(), err
	}); err != nil {
		return o, err
	}
	charge := task(wf, "charge")
	env.Logf("charge's 1s lease ran out; the fleet ran it again under fence %d and its completion released reserve and receipt, then ship", charge.Fence)
	if _, err := fmt.Fprintln(ch.Stdin, "wake"); err != nil {
		return o, err
	}
	if err := ch.Cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return o, err
	}
	co, err := ch.Outcome(ctx)
	if err != nil {
		return o, err
	}
	if err := ch.Wait(); err != nil {
		return o, fmt.Errorf("worker process: %w", err)
	}
	env.Logf("SIGCONT: the woken process completed charge: committed %d, refused as stale %d (lost %d)", co.Completed, co.Stale, co.Lost)
	stop()
	if wf, err = c.Workflow(ctx, res.ID); err != nil {
		return o, err
	}
	return measure(ctx, env.Pool, wf, pausedFence, co)
}

// measure reads back what the workflow did.
func measure(ctx context.Context, pool *pgxpool.Pool, wf *pgqueue.WorkflowInfo, pausedFence int64, co scenario.ChildOutcome) (scenario.Result, error) {
	var o scenario.Result
	charge := task(wf, "charge")
	accepted := fmt.Sprintf("rescuer-%d", charge.Fence)
	want := map[string]string{"reserve": accepted, "receipt": accepted,
		"ship": "reserve after " + accepted + " and receipt after " + accepted}
	rows, err := pool.Query(ctx, `SELECT task, seen FROM order_effects`)
	if err != nil {
		return o, err
	}
	seen := map[string][]string{}
	for rows.Next() {
		var t, s string
		if err := rows.Scan(&t, &s); err != nil {
			rows.Close()
			return o, err
		}
		seen[t] = append(seen[t], s)
		o.Effects++
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return o, err
	}
	o.WantEffects = 3
	for _, t := range wf.Tasks {
		o.Attempted += int64(t.Attempt)
	}
	o.Attempted++ // the paused process's attempt, which the rescue ended
	if co.Stale+co.Lost > 0 {
		o.Rejected = 1
	}
	if co.Completed != 0 || o.Rejected != 1 {
		o.Problems = append(o.Problems, fmt.Sprintf("paused process: committed %d, refused %d; want 0 and 1", co.Completed, co.Stale+co.Lost))
	}
	if charge.State != queue.StateCompleted || charge.Fence == pausedFence || string(charge.Output) != `{"charge_id": "`+accepted+`"}` {
		o.Problems = append(o.Problems, fmt.Sprintf("charge is %s with output %s, want completed by the fleet", charge.State, charge.Output))
	}
	for name, w := range want {
		t := task(wf, name)
		if got := seen[name]; len(got) != 1 || got[0] != w {
			o.Problems = append(o.Problems, fmt.Sprintf("%s ran %d times and saw %q, want once %q", name, len(got), got, w))
		}
		if t.State != queue.StateCompleted || t.Attempt != 1 || t.AttemptedAt.Before(charge.FinalizedAt) {
			o.Problems = append(o.Problems, fmt.Sprintf("%s: %s after %d attempts, claimed %s, charge completed %s", name, t.State, t.Attempt, t.AttemptedAt, charge.FinalizedAt))
		}
	}
	return o, nil
}

func task(wf *pgqueue.WorkflowInfo, name string) *pgqueue.Task {
	for _, t := range wf.Tasks {
		if t.TaskName == name {
			return t
		}
	}
	return &pgqueue.Task{Job: &queue.Job{TaskName: name}}
}

// fleet starts n instances running the whole workflow, each with its own
// pool, rescuing expired leases often; stop stops them (again: nothing).
func fleet(ctx context.Context, env *scenario.Env, n int) (stop func(), err error) {
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
		Register(reg, "rescuer")
		w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: env.Log()}), reg, worker.Config{
			ID: fmt.Sprintf("%s-%d", Queue, i+1), Queues: map[string]int{Queue: 4}, Lease: 5 * time.Second,
			RescueInterval: 200 * time.Millisecond, PollInterval: 100 * time.Millisecond, Logger: env.Log(),
			RetryPolicy: worker.ExponentialRetry{Max: 100 * time.Millisecond},
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
