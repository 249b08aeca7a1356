package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// rescuers starts the fleet's other instances: n workers on q, each with
// its own pool, rescuing expired leases often. Their handler records the
// shipment in the job's transaction. stop stops them.
func rescuers(ctx context.Context, d *demo, q string, n int) (ws []*worker.Worker, stop func(), err error) {
	stop = func() {
		for _, w := range ws {
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			w.Stop(stopCtx)
			cancel()
		}
	}
	for i := range n {
		pool, err := newDemoPool(ctx, d, 4)
		if err != nil {
			stop()
			return nil, nil, err
		}
		id := fmt.Sprintf("%s-rescuer-%d", q, i+1)
		reg := worker.NewRegistry()
		worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[shipArgs]) error {
			_, err := tx.Exec(ctx, insertShipmentSQL, job.ID, job.Fence, id)
			return err
		})
		w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: d.log}), reg, worker.Config{
			ID: id, Queues: map[string]int{q: 4}, Lease: 5 * time.Second,
			RescueInterval: 200 * time.Millisecond, PollInterval: 100 * time.Millisecond, Logger: d.log,
		})
		if err == nil {
			err = w.Start(ctx)
		}
		if err != nil {
			pool.Close()
			stop()
			return nil, nil, err
		}
		ws = append(ws, w)
		prev := stop
		stop = func() { prev(); pool.Close() }
	}
	return ws, sync.OnceFunc(stop), nil
}

// shipInChild enqueues one shipment job on queue q and starts a worker
// process (mode q) that claims it; it returns once the child has claimed
// the job, with the claim's fence.
func shipInChild(ctx context.Context, d *demo, q string, order int) (*pgqueue.Client, int64, *child, int64, error) {
	c, id, err := shipOne(ctx, d, q, order)
	if err != nil {
		return nil, 0, nil, 0, err
	}
	ch, err := startChild(ctx, d, q)
	if err != nil {
		return nil, 0, nil, 0, err
	}
	jobID, fence, err := ch.started(ctx)
	if err == nil && jobID != id {
		err = fmt.Errorf("worker process claimed job %d, want %d", jobID, id)
	}
	if err != nil {
		ch.kill()
		return nil, 0, nil, 0, err
	}
	return c, id, ch, fence, nil
}

// shipOne enqueues one shipment job on q and returns the client and its ID.
func shipOne(ctx context.Context, d *demo, q string, order int) (*pgqueue.Client, int64, error) {
	if _, err := d.pool.Exec(ctx, createShipmentsSQL); err != nil {
		return nil, 0, err
	}
	c := pgqueue.New(d.pool, pgqueue.Config{Logger: d.log})
	res, err := c.Insert(ctx, shipArgs{Order: order}, &queue.InsertOpts{Queue: q})
	if err != nil {
		return nil, 0, err
	}
	return c, res.ID, nil
}

// waitCompleted waits until job id is completed and returns it.
func waitCompleted(ctx context.Context, c *pgqueue.Client, id int64) (*queue.Job, error) {
	var j *queue.Job
	err := waitUntil(ctx, 2*time.Minute, fmt.Sprintf("job %d to complete", id), func() (bool, error) {
		var err error
		j, err = c.Get(ctx, id)
		return err == nil && j.State == queue.StateCompleted, err
	})
	return j, err
}

// demoPaused is scenario 4: a worker process claims a job, is paused with
// SIGSTOP past its 1s lease, the job is rescued and shipped by another
// instance, then the paused process is resumed and writes: the fence
// rejects its transaction and the order ships once.
func demoPaused(ctx context.Context, d *demo, p progress) (outcome, error) {
	var o outcome
	c, id, ch, fence, err := shipInChild(ctx, d, "paused", 4)
	if err != nil {
		return o, err
	}
	defer ch.kill()
	if err := ch.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return o, err
	}
	p("worker process %d claimed job %d (fence %d); SIGSTOP", ch.pid(), id, fence)
	ws, stop, err := rescuers(ctx, d, "paused", 2)
	if err != nil {
		return o, err
	}
	defer stop()
	j, err := waitCompleted(ctx, c, id)
	if err != nil {
		return o, err
	}
	p("its 1s lease ran out; %s rescued the job and shipped it under fence %d", j.AttemptedBy[len(j.AttemptedBy)-1], j.Fence)
	// The line is waiting in the pipe when the process resumes: it wakes
	// and writes at once, as a paused process does.
	if _, err := fmt.Fprintln(ch.stdin, "wake"); err != nil {
		return o, err
	}
	if err := ch.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return o, err
	}
	co, err := ch.outcome(ctx)
	if err != nil {
		return o, err
	}
	if err := ch.wait(); err != nil {
		return o, fmt.Errorf("worker process: %w", err)
	}
	// The write is refused at the completion under the stale fence, or
	// earlier if the woken worker's first heartbeat (refused under the same
	// fence) cancelled the handler first; either way it rolls back.
	how := "its completion under fence %d was refused as stale; its transaction rolled back"
	if co.stale == 0 {
		how = "its heartbeat under fence %d was refused, so the worker cancelled the handler; its transaction rolled back"
	}
	p("SIGCONT: the woken process wrote its shipment; committed %d; "+how, co.completed, fence)
	stop()

	var effects, effectFence int64
	var writer string
	if err := d.pool.QueryRow(ctx, shipmentsSQL, id).Scan(&effects, &effectFence, &writer); err != nil {
		return o, err
	}
	o.Attempted = 2 // the paused owner's write and the rescuer's
	o.Effects, o.WantEffects = effects, 1
	if co.stale+co.lost > 0 {
		o.Rejected = 1
	}
	if co.completed != 0 || o.Rejected != 1 {
		o.Problems = append(o.Problems, fmt.Sprintf("paused process: committed %d, refused %d; want 0 and 1", co.completed, co.stale+co.lost))
	}
	if effects == 1 && (effectFence != j.Fence || writer == ch.id()) {
		o.Problems = append(o.Problems, fmt.Sprintf("the shipment has fence %d by %s, want the rescuer's fence %d", effectFence, writer, j.Fence))
	}
	if j.Attempt != 2 || !slices.ContainsFunc(ws, func(w *worker.Worker) bool { return w.Stats().Rescued > 0 }) {
		o.Problems = append(o.Problems, fmt.Sprintf("job ran %d attempts, want 2 (one rescued)", j.Attempt))
	}
	p("shipments of order 4: %d (by %s under fence %d)", effects, writer, effectFence)
	return o, nil
}
