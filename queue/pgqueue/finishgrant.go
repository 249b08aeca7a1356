package pgqueue

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/txbound"
	"github.com/jobfence/jobfence/queue"
)

// batchBoundsSQL bounds a transaction that a batch opens with BEGIN (the
// outcomes' in finishAndGrant, an insert's in enqueueAndWake), as
// boundedTx bounds one sent statement by statement: each lock wait, and
// the transaction's idle time if it is ever left idle. PostgreSQL arms
// the idle bound only once a whole batch has been answered, so a client
// frozen or cut off after sending part of a batch holds what the
// transaction locked until a worker's maintenance ends its session
// (EndStalledSessions, Config.StalledSession).
var batchBoundsSQL = txbound.Bounds(txbound.Idle, txbound.LockWait)

// heldPartitions returns the limit partitions that the jobs of fs held a
// slot of when they were claimed (queue.Finish.Limit), once each, and the
// IDs of those jobs by partition (for handOverSQL).
func heldPartitions(fs []queue.Finish) ([]partition, map[partition][]int64) {
	var held partitionSet
	var ids map[partition][]int64
	for _, f := range fs {
		if f.Limit == "" {
			continue
		}
		p := partition{f.Limit, f.LimitPartition}
		held.add(p)
		if ids == nil {
			ids = map[partition][]int64{}
		}
		ids[p] = append(ids[p], f.ID)
	}
	return held.list, ids
}

// finishAndGrant applies a finish statement (sql, args) and grants in the
// partitions held in one round trip: one batch of two transactions, the
// outcomes' (an explicit BEGIN ... COMMIT) and then the grant's (the
// implicit one the batch's end commits). A slot a completion frees went
// round in four round trips in a row (the completion, its grant, the
// grant's NOTIFY, a claim); this saves the second's.
//
// The slots the outcomes free in the partitions of a limit with no rate
// (a concurrency cap or a sequence, see grantRoutes) are handed to the
// partitions' next jobs in the outcomes' own transaction, after them, by
// handOverSQL, given the IDs of their jobs in those partitions
// (limited): it waits for no lock, so it holds their commit up by its own
// run only, and it saves the grant's commit (a WAL flush on a durable
// server) and statements. Its statement sees the outcomes (a statement
// sees its transaction's earlier writes).
// Its failure fails the outcomes too: Finish returns the error and the
// worker sends them again, as after a lost connection. The partitions it
// leaves to the general grant are granted after the commit (grantAfter).
//
// The others' grant (grantSQL) is in a transaction of its own, after the
// outcomes' commit: in theirs, the outcomes would stay uncommitted, their
// rows locked, while the grant ran and waited (grantWait) for other
// grants' rows. Its snapshot is taken after that commit, so it sees the
// slots they freed.
//
// Neither creates slots (see queueGrant): the jobs held them. Both
// commit without waiting for this client (the server runs a batch to its
// end), so a client frozen after sending it holds no row of either. A
// failed outcome statement skips the grant (the server skips the rest of a
// batch after an error); a failed grantSQL is logged, as grantAfter's: the
// outcomes are committed, and the workers' next grant pass grants instead.
//
// With claim, handOverSQL also claims, for the worker that sent the
// outcomes, the jobs it hands the slots they freed (see FinishClaim).
//
// With workflow tasks among the jobs (tasks, completions only: they
// cascade nothing), releaseSQL follows the outcomes in their transaction,
// a statement of its own (see finishBatch). The server runs the batch to
// its commit without the client, so the rows the release locks (a
// fan-in's, which every completion of its dependencies decrements) are
// held for the statements and the commit only, never for a round trip
// (TestFrozenTaskCompleterHoldsNoFanIn).
//
// No statement of the batch notifies: the jobs it made available, granted
// or released, wake their queues' workers once the batch has committed
// (wakeReady), so that its durable commit does not wait for other
// notifying commits (TestReadyJobsNotifyAfterTheirCommit).
//
// It returns what finishBatch does, the leases applied and every partition
// the applied outcomes freed a slot of, held or not, the held partitions
// that handOverSQL left to the general grant or found to have a rate
// (the caller grants both after), and the jobs it claimed.
func (c *Client) finishAndGrant(ctx context.Context, sql string, args []any, tasks []int64, limited map[partition][]int64, held []partition, claim *concClaim, dc *dependentsClaim) (finishGrant, error) {
	applied := make(map[queue.Lease]bool, len(args[0].([]int64)))
	var lims partitionSet
	conc, full := c.routes.split(held, time.Now())
	fullChunks := grantChunks(full)
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue(batchBoundsSQL)
	b.Queue(sql, args...)
	if len(tasks) > 0 {
		if dc != nil && len(dc.reserved) > 0 {
			queues, caps := claimCapsArgs(dc.reserved)
			b.Queue(releaseClaimSQL, tasks, c.cfg.ReleaseChunk, queues, caps, dc.lease.Microseconds(), dc.workerID)
		} else {
			b.Queue(releaseSQL, tasks, c.cfg.ReleaseChunk, "")
		}
	}
	if len(conc) > 0 {
		b.Queue(genericPlanSQL)
		var ids []int64
		for _, p := range conc {
			ids = append(ids, limited[p]...)
		}
		queueHandOver(&b, conc, ids, claim)
	}
	b.Queue("COMMIT")
	if len(fullChunks) > 0 {
		b.Queue(grantSettingsSQL, grantWait.Milliseconds())
		queueFullGrant(&b, fullChunks)
	}
	br := c.pool.SendBatch(ctx, &b)
	granted := map[string]int{}
	var declined, again []partition
	var handed claimReply
	var more, cascades []int64
	var releasedClaim claimReply
	_, err := br.Exec()
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			err = scanFinished(rows, applied, &lims)
		}
	}
	if err == nil && len(tasks) > 0 {
		var rows pgx.Rows
		if rows, err = br.Query(); err == nil {
			var r released
			r, err = scanReleased(rows)
			more, releasedClaim, cascades = r.more, r.claim, r.cascades
			for q, n := range r.ready {
				granted[q] += n
			}
		}
		if err != nil {
			err = fmt.Errorf("release dependents: %w", err)
		}
	}
	if err == nil && len(conc) > 0 {
		if _, err = br.Exec(); err == nil {
			handed, declined, again, err = readGrantReply(br, granted)
		}
	}
	if err == nil {
		_, err = br.Exec()
	}
	if err != nil {
		br.Close()
		return finishGrant{}, err
	}
	if len(fullChunks) > 0 {
		if _, err = br.Exec(); err == nil {
			err = c.readFullGrant(br, fullChunks, granted)
		}
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		c.cfg.Logger.Warn("pgqueue: granting limit slots failed; the workers' next pass grants them", "err", err)
	}
	c.wakeReady(ctx, granted)
	if len(declined) > 0 {
		c.routes.markFull(declined, time.Now())
	}
	// The outcomes and the claims are committed: a failed read of the
	// claimed jobs fails neither (see claimedJobs).
	claimed, rerr := c.claimedJobs(ctx, handed, claim != nil && claim.traces)
	if rerr != nil {
		c.cfg.Logger.Warn("pgqueue: reading the jobs that outcomes claimed failed; they are rescued when their lease expires", "err", rerr)
	}
	return finishGrant{applied: applied, lims: lims.list, declined: append(declined, again...), claimed: claimed, more: more, released: releasedClaim, cascades: cascades}, nil
}

// finishGrant is what finishAndGrant returns: the leases applied, every
// partition the applied outcomes freed a slot of, the held partitions
// that handOverSQL did not serve, and the jobs it claimed.
type finishGrant struct {
	applied  map[queue.Lease]bool
	lims     []partition
	declined []partition
	claimed  []*queue.Job
	// more are the completed tasks whose dependents past the first chunk
	// wait in jobfence_releases (see releaseSQL).
	more []int64
	// released is what the tasks' release claimed (releaseClaimSQL), for
	// the slots reserved (fill).
	released claimReply
	// cascades are the RunOnFailure tasks the release cancelled (no
	// dependency failed), whose dependents are cancelled after the
	// commit (cascadeAfterCommit).
	cascades []int64
}

// total is how many jobs claim asks for over the batch (0 for nil).
func (claim *concClaim) total() int {
	if claim == nil {
		return 0
	}
	n := 0
	for _, k := range claim.caps {
		n += k
	}
	return n
}

// finishClaimJobs bounds the jobs a batch of outcomes claims: as many as
// a worker's claim takes by default (worker.Config.FetchLimit). Their IDs
// and row versions come back before the batch commits, as a claim's do;
// the rows of all but a few are read after it (claimedJobs).
const finishClaimJobs = 1000

// claimCaps returns what fs ask handOverSQL to claim (see
// queue.Finish.ClaimNext) for the worker p describes, or nil: finishClaimJobs
// jobs at most over the whole batch, claimed by one statement whose
// reply holds the rows of a few of them (see handOverSQL).
func claimCaps(fs []queue.Finish, p *queue.FinishClaimParams) *concClaim {
	if p == nil {
		return nil
	}
	caps := map[partition]int{}
	n := 0
	for _, f := range fs {
		if f.ClaimNext && f.Limit != "" && n < finishClaimJobs {
			caps[partition{f.Limit, f.LimitPartition}]++
			n++
		}
	}
	if len(caps) == 0 {
		return nil
	}
	return &concClaim{caps: caps, lease: p.Lease, workerID: p.WorkerID, traces: p.DependencyTraces}
}

// without returns the partitions of ps that are not in drop.
func without(ps, drop []partition) []partition {
	if len(ps) == 0 {
		return ps
	}
	gone := make(map[partition]bool, len(drop))
	for _, p := range drop {
		gone[p] = true
	}
	return slices.DeleteFunc(ps, func(p partition) bool { return gone[p] })
}

// scanFinished reads the rows of a finish statement (completeSQL,
// finishSQL): each applied lease goes in applied, and the limit partition
// of its job, if any, in lims, once.
func scanFinished(rows pgx.Rows, applied map[queue.Lease]bool, lims *partitionSet) error {
	defer rows.Close()
	for rows.Next() {
		var l queue.Lease
		var limName, limPart *string
		if err := rows.Scan(&l.ID, &l.Fence, &limName, &limPart); err != nil {
			return err
		}
		applied[l] = true
		if limName != nil && limPart != nil {
			lims.add(partition{*limName, *limPart})
		}
	}
	return rows.Err()
}
