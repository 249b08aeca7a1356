package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jobfence/jobfence/internal/txbound"
)

// A completed task with many dependents (a fan-out) releases the first
// Config.ReleaseChunk of them in its completion's own transaction, under its
// fence, and records the rest as ranges of its dependents list in
// jobfence_releases (migration 00021), in that same transaction. The
// ranges are released after the commit, each in a statement of its own
// (releaseRangeSQL), by the client that sent the completion and, should
// it stop first, by any worker's maintenance (ReleaseDependents).
//
// One transaction releasing 10,000 dependents is serial: their tasks wait
// for all of it before the first can be claimed, and the root's
// completion holds its rows for as long. In ranges, the first tasks are
// claimed while the next ranges are being released, several at once.
//
// What holds: a range is recorded only by the accepted completion (the
// xmin test of releaseClosure's done: a zombie's stale outcome writes
// nothing, so records nothing), and a range is released once (the
// statement that releases it deletes it, under the row lock it took with
// SKIP LOCKED, in the same statement). A range covers the dependents the
// list held at the completion: a task appended later to a completed task
// does not count it among its dependencies (workflow.Append), and no range
// reaches it.
const (
	// releaseWorkers is how many ranges a client releases at once, each in
	// a round trip of its own.
	releaseWorkers = 4
	// releaseRangeTimeout bounds one range's release: its wait for a
	// connection and its statement, whose wait for a dependent's row it
	// bounds as txbound.LockWait bounds other statements' lock waits (the
	// cancel ends the wait). A range it stops stays recorded, for the
	// next try or a worker's maintenance.
	releaseRangeTimeout = txbound.LockWait
	// releaseHold bounds how long a range whose releases claim for a
	// worker (dependentsClaim) waits for a slot of the worker to come
	// free before it is released whole, its dependents made available
	// for any worker of the fleet.
	releaseHold = 20 * time.Millisecond
	// releaseClaimWindow bounds how long after its completion's commit a
	// fan-out's ranges claim for its worker at all: past it, every range
	// left is released whole, so that a worker that runs the fan-out's
	// tasks more slowly than it can claim them (a slot freed every
	// releaseHold) does not keep them from the rest of the fleet.
	releaseClaimWindow = time.Second
	// maxMaintainedRanges bounds the ranges one ReleaseDependents(nil)
	// releases, so that a maintenance pass ends.
	maxMaintainedRanges = 10_000
)

// DefaultReleaseChunk is the default of Config.ReleaseChunk: how many
// dependents of a completed workflow task its completion releases itself,
// and how many a range of the rest holds.
const DefaultReleaseChunk = 1000

// releaseRangeSQL releases one range of jobfence_releases, of the tasks
// $1 (NULL: of any task), that no other session is releasing (SKIP
// LOCKED), and deletes it. Its dependents are the list's entries [first,
// last] of the task as it is now (the list only grows: Append adds at its
// end). A task deleted meanwhile (pruned: its dependents had all ended)
// leaves the range nothing to release. The dependents are locked and
// changed as releaseSQL changes them, in ascending ID order, so that it
// and every completion lock in one order. It replies, as releaseSQL
// does, with a row per queue that dependents became available in, whose
// workers the caller wakes once the statement has committed (wakeReady),
// and the range's task (none: nothing was left).
//
// transition: release
var releaseRangeSQL = releaseRangeHead + releaseLockTail + releaseUpdateTail + releaseRangeGone + `
SELECT w.queue, NULL::bigint, NULL::text FROM (SELECT DISTINCT queue FROM u WHERE u.state = 'available') w
UNION ALL
SELECT NULL, task_id, NULL FROM r
UNION ALL
SELECT NULL, task_id, 'cascade' FROM cq`

// releaseRangeHead picks the range and its dependents (s) for
// releaseRangeSQL.
var releaseRangeHead = releaseRangeHeadTo("r.last")

// releaseRangeHeadTo is releaseRangeHead for the range's entries up to
// the one last names.
func releaseRangeHeadTo(last string) string {
	return `
WITH r AS MATERIALIZED (
    SELECT x.task_id, x.first, x.last FROM jobfence_releases x
    WHERE $1::bigint[] IS NULL OR x.task_id = ANY($1::bigint[])
    ORDER BY x.task_id, x.first
    LIMIT 1
    FOR UPDATE SKIP LOCKED
), edges AS (
    SELECT u.id FROM r
    CROSS JOIN LATERAL (SELECT p.dependents FROM jobfence_jobs p WHERE p.id = r.task_id OFFSET 0) p
    CROSS JOIN LATERAL unnest(p.dependents[r.first:` + last + `]) AS u(id)
), s AS (
    SELECT id, count(*)::int AS n, false AS failed, false AS cancel, NULL::text AS cause, NULL::text AS cause_state
    FROM edges GROUP BY id
)`
}

// releaseRangeGone deletes the range that releaseRangeHead picked.
const releaseRangeGone = `, gone AS (
    DELETE FROM jobfence_releases x USING r WHERE x.task_id = r.task_id AND x.first = r.first
)`

// releaseRange releases one range of the tasks ids (nil: of any task) and
// reports whether there was one. A client runs releaseWorkers of them at
// once at most, whatever the completions and maintenance passes asking:
// the rest wait their turn, and the pool keeps connections for claims and
// outcomes.
//
// With dc, it first reserves up to a range's worth of slots of queue q
// (the range's task's queue), waiting releaseHold at most for one to come
// free, and releases as many of the range's entries as it reserved slots,
// claiming into them what they make ready (releaseRangeClaimSQL, which
// keeps the range's other entries recorded for the next call), then fills
// them (fill). With no slot free after releaseHold, it releases the whole
// range for any claim. So a worker that keeps up with a fan-out runs it
// with one row version a task fewer, and one that does not leaves it to
// the fleet: a range waits for it releaseHold at most at a time.
func (c *Client) releaseRange(ctx context.Context, ids []int64, dc *dependentsClaim, q string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, releaseRangeTimeout)
	defer cancel()
	select {
	case c.releases.turns <- struct{}{}:
		defer func() { <-c.releases.turns }()
	case <-ctx.Done():
		return false, ctx.Err()
	}
	sql, args := releaseRangeSQL, []any{ids}
	var reserved map[string]int
	if dc != nil && time.Now().Before(dc.until) {
		n := dc.slots.Reserve(q, c.cfg.ReleaseChunk)
		hold := time.Now().Add(releaseHold)
		if dc.until.Before(hold) {
			hold = dc.until
		}
		for n == 0 && ctx.Err() == nil && time.Now().Before(hold) {
			select {
			case <-time.After(time.Millisecond):
			case <-ctx.Done():
			}
			n = dc.slots.Reserve(q, c.cfg.ReleaseChunk)
		}
		if n > 0 {
			reserved = map[string]int{q: n}
			sql, args = releaseRangeClaimSQL, []any{ids, []string{q}, []int32{int32(n)}, dc.lease.Microseconds(), dc.workerID, n}
		}
	}
	sent := time.Now()
	r, err := c.queryReleased(ctx, sql, args)
	if dc != nil {
		c.fill(ctx, dc, reserved, r.claim, sent)
	}
	if err != nil {
		return false, err
	}
	// The statement committed as its reply ended.
	c.wakeReady(ctx, r.ready)
	c.cascadeAfterCommit(ctx, r.cascades)
	return len(r.more) > 0, nil
}

// queryReleased runs a release statement on its own and reads its reply.
func (c *Client) queryReleased(ctx context.Context, sql string, args []any) (released, error) {
	rows, err := c.pool.Query(ctx, sql, args...)
	if err != nil {
		return released{}, err
	}
	return scanReleased(rows)
}

// ReleaseDependents releases the dependents that completed workflow tasks
// left to release after their completion's commit (see
// Config.ReleaseChunk): those of the tasks ids, or of any task when ids is
// nil, releaseWorkers ranges at once. It returns the ranges it released.
// The client that completed a task calls it in the background after the
// commit; every worker calls it with nil at each rescue, for the ranges of
// a client that stopped first; a worker calls it after a transactional
// handler's commit. Any number of clients may call it at once: each range
// is released by one of them. With nil it releases maxMaintainedRanges at
// most.
func (c *Client) ReleaseDependents(ctx context.Context, ids []int64) (int, error) {
	return c.releaseDependents(ctx, ids, nil, "")
}

// releaseDependents is ReleaseDependents, claiming as releaseRange does
// with dc in queue q.
func (c *Client) releaseDependents(ctx context.Context, ids []int64, dc *dependentsClaim, q string) (int, error) {
	if ids != nil && len(ids) == 0 {
		return 0, nil
	}
	if ids == nil {
		// Maintenance: the cancels that a stopped client left to cascade
		// (see cascadeSQL) too.
		if err := c.cascadeLeft(ctx, nil); err != nil {
			return 0, fmt.Errorf("pgqueue: release dependents: %w", err)
		}
	}
	var (
		n    atomic.Int64
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	for range releaseWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil && (ids != nil || n.Load() < maxMaintainedRanges) {
				ok, err := c.releaseRange(ctx, ids, dc, q)
				if err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
				if !ok {
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return int(n.Load()), fmt.Errorf("pgqueue: release dependents: %w", err)
	}
	return int(n.Load()), ctx.Err()
}

// releasesLeftSQL counts the ranges left to release of workflow $1's
// tasks.
const releasesLeftSQL = `
SELECT count(*) FROM jobfence_releases x JOIN jobfence_jobs j ON j.id = x.task_id WHERE j.workflow_id = $1`

// ReleasesLeft returns how many ranges of dependents the completed tasks
// of workflow id have left to release (see ReleaseDependents): none once
// every completion's dependents are released.
func (c *Client) ReleasesLeft(ctx context.Context, id string) (int, error) {
	var n int
	if err := c.pool.QueryRow(ctx, releasesLeftSQL, id).Scan(&n); err != nil {
		return 0, fmt.Errorf("pgqueue: ranges left to release of workflow %s: %w", id, err)
	}
	return n, nil
}

// releases runs the releases a client starts after its completions'
// commits (releaseLater), until close.
type releases struct {
	ctx    context.Context
	cancel context.CancelFunc
	mu     sync.Mutex
	closed bool
	// running holds a channel for each background release, closed when
	// it ends (see wait); next numbers them.
	running map[uint64]chan struct{}
	next    uint64
	// turns holds a token for each range being released (releaseRange).
	turns chan struct{}
}

func newReleases() *releases {
	ctx, cancel := context.WithCancel(context.Background())
	return &releases{ctx: ctx, cancel: cancel, running: make(map[uint64]chan struct{}), turns: make(chan struct{}, releaseWorkers)}
}

// releaseLater releases, in the background, the ranges that the
// completions of the tasks ids recorded. A failure is logged: the ranges
// stay recorded, and a worker's maintenance releases them. After Close it
// releases them before it returns, bounded by ctx.
//
// With dc, each task's ranges claim for the worker in the task's queue
// (releaseRange).
func (c *Client) releaseLater(ctx context.Context, ids []int64, dc *dependentsClaim) {
	if len(ids) == 0 {
		return
	}
	if dc != nil {
		dc.until = time.Now().Add(releaseClaimWindow)
	}
	r := c.releases
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		c.releaseNow(ctx, ids, dc)
		return
	}
	n := r.next
	r.next++
	done := make(chan struct{})
	r.running[n] = done
	r.mu.Unlock()
	go func() {
		defer r.end(n, done)
		c.releaseNow(r.ctx, ids, dc)
	}()
}

// end ends background release n.
func (r *releases) end(n uint64, done chan struct{}) {
	r.mu.Lock()
	delete(r.running, n)
	r.mu.Unlock()
	close(done)
}

// wait waits until the background releases running when it is called
// have ended, or ctx ends. It does not wait for those started meanwhile:
// a client that keeps completing fan-outs would otherwise hold it for as
// long as ctx allows.
func (r *releases) wait(ctx context.Context) error {
	r.mu.Lock()
	running := make([]chan struct{}, 0, len(r.running))
	for _, done := range r.running {
		running = append(running, done)
	}
	r.mu.Unlock()
	for _, done := range running {
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// WaitReleases implements queue.ReleaseWaiter: it waits until the
// releases of dependents that the client was running in the background
// when it was called, after its completions' commits (releaseLater), are
// done, and then until the wake-ups that they and the client's outcomes
// and grants left to send in the background (wakeReady) are sent, or ctx
// ends. Unlike Close, it leaves the client releasing and waking in the
// background afterwards.
func (c *Client) WaitReleases(ctx context.Context) error {
	if err := c.releases.wait(ctx); err != nil {
		return fmt.Errorf("pgqueue: wait for the releases of workflow tasks' dependents: %w", err)
	}
	if err := c.wakes.wait(ctx); err != nil {
		return fmt.Errorf("pgqueue: wait for the wake-ups of jobs made ready: %w", err)
	}
	return nil
}

// releaseNow is ReleaseDependents for ids, its failure logged. With dc,
// the ranges of the tasks of each queue claim there, the queues one after
// another.
func (c *Client) releaseNow(ctx context.Context, ids []int64, dc *dependentsClaim) {
	byQueue := map[string][]int64{}
	for _, id := range ids {
		q := ""
		if dc != nil {
			q = dc.queues[id]
		}
		byQueue[q] = append(byQueue[q], id)
	}
	for q, ids := range byQueue {
		claim := dc
		if q == "" {
			claim = nil
		}
		if _, err := c.releaseDependents(ctx, ids, claim, q); err != nil {
			c.cfg.Logger.Warn("pgqueue: releasing a workflow task's dependents failed; a worker's maintenance releases them",
				"tasks", ids, "err", err)
		}
	}
}

// close stops the background releases and waits for them.
func (r *releases) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wait(context.Background())
}
