package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobfence/jobfence/queue"
)

// doneChannel is where the triggers of migration 00028 notify the end of
// an awaited job: the payload is the job's ID, and for a workflow task
// also "w<workflow ID>".
const doneChannel = "jobfence_done"

// The defaults of Config.AwaitPollMin and Config.AwaitPollMax.
const (
	DefaultAwaitPollMin = 50 * time.Millisecond
	DefaultAwaitPollMax = time.Second
)

// How a waiter is woken, and why so.
//
// The completion statements (completeSQL, finishSQL, the grants' and the
// releases') send no NOTIFY: one in their transaction would make every
// commit take the server's notify lock in turn (see wakeReady), for
// completions that nobody awaits. A waiter instead marks the job it
// awaits (awaited, markAwaitedSQL), after it LISTENs on doneChannel and
// before it reads the job; the triggers of migration 00028 notify, from
// the transaction that ends an awaited job, only when the row says so. A
// job nobody awaits costs each completion a test of that column in the
// triggers' WHEN (docs/benchmarks/await.md). The mark commits before the
// read, so either the completion comes after the mark, sees it and
// notifies, or it committed before the read, which finds the job ended.
// A waiter that cannot LISTEN (PollOnly, a LISTEN connection down) polls,
// with backoff (Config.AwaitPollMin to AwaitPollMax), and always does, in
// case a notification is lost with its connection.

// markAwaitedSQL marks job $1 awaited unless it has ended: an UPDATE of
// one column no index holds, so a HOT update. It waits for the lock of a
// completion in flight, and then finds the job ended.
const markAwaitedSQL = `UPDATE jobfence_jobs SET awaited = true
WHERE id = $1 AND awaited IS NOT TRUE AND state NOT IN ('completed', 'discarded', 'cancelled')`

// markWorkflowAwaitedSQL marks the unfinished tasks of workflow $1
// awaited. It skips the tasks locked now (a completion, a release): it
// locks several rows, and waiting for them in its order could deadlock
// with a statement that locks them in another. A skipped task is marked
// at the next read, or its end is found by it.
const markWorkflowAwaitedSQL = `UPDATE jobfence_jobs SET awaited = true
WHERE id IN (SELECT j.id FROM ` + workflowTaskRowsSQL + `
    AND j.awaited IS NOT TRUE AND j.state NOT IN ('completed', 'discarded', 'cancelled')
    ORDER BY j.id FOR UPDATE OF j SKIP LOCKED)`

// workflowUnfinishedSQL counts the tasks of workflow $1 that have not
// ended.
const workflowUnfinishedSQL = `SELECT count(*) FROM ` + workflowTaskRowsSQL + `
    AND j.state NOT IN ('completed', 'discarded', 'cancelled')`

// AwaitJob returns job id once it has ended (completed, discarded or
// cancelled), as Get reads it, its output included. It is woken by a
// notification of the job's end (see Config.ListenURL: through PgBouncer
// in transaction mode LISTEN needs it) and polls meanwhile, backing off
// from Config.AwaitPollMin to AwaitPollMax, so it also works with
// PollOnly. A job that ends, is retried and ends again may be returned
// in either end. An ID that names no job, or a job that was deleted or
// pruned (its retention passed) before AwaitJob read it, is an error
// wrapping queue.ErrJobNotFound; ctx ending is an error wrapping ctx's.
func (c *Client) AwaitJob(ctx context.Context, id int64) (*queue.Job, error) {
	var job *queue.Job
	err := c.await(ctx, strconv.FormatInt(id, 10), func(ctx context.Context) (bool, error) {
		b := &pgx.Batch{}
		b.Queue(markAwaitedSQL, id)
		b.Queue(getSQL, id)
		br := c.pool.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return false, err
		}
		j, err := scanGot(br.QueryRow(), id)
		if errors.Is(err, pgx.ErrNoRows) {
			return false, fmt.Errorf("%w (no job has this ID: it was never inserted, or was deleted, or pruned after it ended)", queue.ErrJobNotFound)
		}
		if err != nil {
			return false, err
		}
		job = j
		return j.State.Final(), nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgqueue: await job %d: %w", id, err)
	}
	return job, nil
}

// AwaitWorkflow returns workflow id, as Workflow reads it, once every one
// of its tasks has ended (completed, discarded or cancelled); tasks
// appended meanwhile (Append) are awaited too. It is woken and polls as
// AwaitJob does. An unknown ID is an error wrapping
// queue.ErrWorkflowNotFound; ctx ending is an error wrapping ctx's.
func (c *Client) AwaitWorkflow(ctx context.Context, id string) (*WorkflowInfo, error) {
	w, err := c.workflowRow(ctx, id)
	if err != nil {
		return nil, err
	}
	var u pgtype.UUID
	if err := u.Scan(w.ID); err != nil {
		return nil, fmt.Errorf("pgqueue: await workflow %s: %w", id, err)
	}
	err = c.await(ctx, "w"+w.ID, func(ctx context.Context) (bool, error) {
		b := &pgx.Batch{}
		b.Queue(markWorkflowAwaitedSQL, u)
		b.Queue(workflowUnfinishedSQL, u)
		br := c.pool.SendBatch(ctx, b)
		defer br.Close()
		if _, err := br.Exec(); err != nil {
			return false, err
		}
		var left int64
		if err := br.QueryRow().Scan(&left); err != nil {
			return false, err
		}
		return left == 0, nil
	})
	if err != nil {
		return nil, fmt.Errorf("pgqueue: await workflow %s: %w", id, err)
	}
	return c.Workflow(ctx, w.ID)
}

// await runs check until it reports done, an error, or ctx ends, waking
// for the notifications of doneChannel whose payload is key and polling
// with backoff. An error after ctx ended is ctx's.
func (c *Client) await(ctx context.Context, key string, check func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	wake := make(chan struct{}, 1)
	notify := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	if !c.cfg.PollOnly {
		// Subscribed (LISTEN confirmed, or subscribeWait passed) before
		// the first check marks the job, so that no end after the mark
		// goes unheard. A connection back after a loss may have missed
		// one: check again then.
		var wasUp atomic.Bool
		c.listener.subscribe(ctx, topic{channel: doneChannel, key: key, keyed: true}, func(string) { notify() }, func(up bool) {
			if up && wasUp.Swap(true) {
				notify()
			}
		})
	}
	delay := c.cfg.AwaitPollMin
	for {
		done, err := check(ctx)
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if err != nil || done {
			return err
		}
		if c.awaitHook != nil {
			c.awaitHook()
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-wake:
			t.Stop()
			delay = c.cfg.AwaitPollMin
		case <-t.C:
			delay = min(delay*2, c.cfg.AwaitPollMax)
		}
	}
}
