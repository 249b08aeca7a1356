package pgqueue

// Completed jobs leave jobfence_jobs (migration 00018): the fenced
// completion moves a job's row into jobfence_jobs_finished, partitioned by
// range of finalized_at, whose partitions the workers' maintenance drops
// whole once they are older than the retention (MaintainFinished), or
// deletes it when it asked for that (queue.EnqueueParams.DeleteOnComplete).
// The jobs table then holds only the jobs that are to run or running, and
// its indexes and vacuum passes stay that size however many jobs finish.

// finishedColumns are the columns of jobfence_jobs that a move into
// jobfence_jobs_finished copies as they are (and a retry copies back):
// every column but state, finalized_at, lease_expires_at, output and
// run_trace, which the completion sets. TestFinishedTableHasEveryColumn fails when a
// migration adds a column to one table and not to the other, or to the
// table and not here.
const finishedColumns = `id, queue, kind, args, priority, scheduled_at, attempt, max_attempts, fence, unique_key, errors,
    attempted_by, created_at, attempted_at, metadata, trace_context, idempotency_key, deadline, timeout_us, unique_hash,
    unique_states, limit_name, limit_part, limit_slot, workflow_id, task_name, depends_on, dependents, deps_left, run_anyway,
    delete_on_complete, dependents_released, run_on_failure, dep_failed, awaiting, awaited, progress, tags, limit_fair`

// finishedOpenSQL says whether the finished partitions cover now(): the
// range jobfence_finished_bounds holds, which MaintainFinished keeps
// without a gap. Outside it (no maintenance yet, or stalled past the
// partitions it made), completions stay in jobfence_jobs: a completion
// never fails for want of a partition. One row, read once per statement.
const finishedOpenSQL = `coalesce((SELECT now() >= b.lo AND now() < b.hi FROM jobfence_finished_bounds b), false)`

// leavesSQL says, of a running job j that completes, whether its row
// leaves jobfence_jobs: into jobfence_jobs_finished while a partition
// covers now(), or nowhere when it asked to be deleted (DeleteOnComplete).
// A job whose row others still look for completes in place, and the
// batched pruner deletes it after the retention: one with a unique_key
// (which refuses duplicates in every state: cron's fires) or with
// unique_states that include completed (its key must keep refusing them),
// a workflow task (its dependents and workflow.Output read it) and a job
// a limit governs (its rate slot counts its start).
const leavesSQL = `(j.workflow_id IS NULL AND j.unique_key IS NULL AND j.limit_name IS NULL
        AND NOT coalesce(jobfence_state_in_bitmask(j.unique_states, 'completed'), false)
        AND (coalesce(j.delete_on_complete, false) OR ` + finishedOpenSQL + `))`

// moveFinishedSQL are the CTEs that take the completed jobs that leave
// the jobs table out of it: l holds the jobs the completion locked (id,
// output, trace, leaves: leavesSQL, drop_it: DeleteOnComplete); gone deletes the
// rows of those that leave, and moved inserts into jobfence_jobs_finished
// those not to be dropped. Only rows l has locked are touched.
const moveFinishedSQL = `gone AS (
    DELETE FROM jobfence_jobs j USING l
    WHERE j.id = l.id AND l.leaves
    RETURNING j.*, l.output AS out, l.trace, l.drop_it
), moved AS (
    INSERT INTO jobfence_jobs_finished (` + finishedColumns + `, state, finalized_at, lease_expires_at, output, run_trace)
    SELECT ` + finishedColumns + `, 'completed', now(), NULL, out, trace FROM gone WHERE NOT drop_it
)`

// finishedReturnSQL ends a completion with the leases it applied, and
// their limits: the jobs gone (moved or deleted) and those kept (the
// update in place).
const finishedReturnSQL = `
SELECT id, fence, limit_name, limit_part FROM gone
UNION ALL
SELECT id, fence, limit_name, limit_part FROM kept`
