package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobfence/jobfence/queue"
)

// workflowRowSQL inserts a new workflow's row (its ID freshly drawn).
const workflowRowSQL = `INSERT INTO jobfence_workflows (id, name) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING`

// workflowExistsSQL says whether workflow $1 exists, and holds its row
// until the transaction that appends tasks to it ends, so that the pruner
// (pruneWorkflowsSQL) cannot delete it meanwhile. The lock (KEY SHARE)
// blocks no other append and no write to the tasks.
const workflowExistsSQL = `SELECT EXISTS (SELECT FROM jobfence_workflows WHERE id = $1 FOR KEY SHARE)`

// existingTasksSQL locks the existing tasks that new tasks depend on, in
// ID order (as every finish locks), so that a dependency's completion and
// this insert take turns: the completion either came first, and this
// insert reads the dependency as completed, or waits for this insert's
// commit and then finds the new dependents in the dependency's row (see
// releaseSQL, a statement of its own for this reason). The wait is bounded
// by the holders' own bounds: a finish is one statement, a transactional
// handler's completion is bounded by its lease (txbound).
// The tasks are found by name in jobfence_workflow_tasks (migration
// 00022); a task pruned since is not found.
const existingTasksSQL = `
SELECT j.id, s.task_name, j.state, coalesce(cardinality(j.dependents), 0)
FROM jobfence_workflow_tasks s JOIN jobfence_jobs j ON j.id = s.job_id
WHERE s.workflow_id = $1 AND s.task_name = ANY($2::text[])
ORDER BY j.id
FOR NO KEY UPDATE OF j`

// addDependentsSQL appends new dependents to existing tasks.
const addDependentsSQL = `
UPDATE jobfence_jobs j SET dependents = coalesce(j.dependents, '{}') || a.ids::bigint[]
FROM unnest($1::bigint[], $2::text[]) AS a(id, ids)
WHERE j.id = a.id`

// taskIDsSQL draws the IDs of new tasks from the jobs' identity sequence,
// so that each task is inserted with its dependencies and dependents
// known, in one statement; in ascending order, which the tasks take in
// dependency order: a dependency's ID is always below its dependents'.
// The sequence is looked up once: pg_get_serial_sequence in the select
// list was evaluated per row, a catalog look-up per task. The same
// sub-select marks the transaction as one that writes its tasks' names
// itself (the setting jobfence.task_names, until the transaction ends),
// which spares its inserts the trigger that writes them for instances of
// the release before migration 00022.
const taskIDsSQL = `SELECT nextval(s.seq) FROM (SELECT pg_get_serial_sequence('jobfence_jobs', 'id')::regclass AS seq,
    set_config('jobfence.task_names', 'written', true) OFFSET 0) s,
    generate_series(1, $1) ORDER BY 1`

// insertTasksSQL inserts tasks with the IDs drawn, each with its
// dependencies and the new tasks that depend on it. A task with no
// dependency left is available (or scheduled, or limited: waiting for a
// slot of the limit that governs it, found as insertManySQL finds it),
// one with some pending, one with a failed dependency that does not run
// anyway cancelled at once.
const insertTasksSQL = `
INSERT INTO jobfence_jobs (id, queue, kind, args, state, priority, scheduled_at, max_attempts, metadata, trace_context,
                           idempotency_key, deadline, timeout_us, workflow_id, task_name, depends_on, dependents, deps_left,
                           run_anyway, errors, finalized_at, limit_name, limit_part)
OVERRIDING SYSTEM VALUE
SELECT id, q, k, a,
       CASE WHEN fail <> '' THEN 'cancelled' WHEN dl_left > 0 THEN 'pending' WHEN s > now() THEN 'scheduled'
            WHEN lim.name IS NOT NULL THEN 'limited' ELSE 'available' END,
       p, greatest(COALESCE(s, now()), now()), m, md, tc, ik, dl, tm, $14, n, d::bigint[], dn::bigint[], dl_left, ra,
       CASE WHEN fail <> '' THEN jsonb_build_array(jsonb_build_object('attempt', 0, 'at', now(),
           'error', 'jobfence: dependency failed: task "' || fail || '; cancelled')) ELSE '[]'::jsonb END,
       CASE WHEN fail <> '' THEN now() END, lim.name, lim.part
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::jsonb[], $5::smallint[], $6::timestamptz[], $7::int[], $8::jsonb[], $9::bytea[],
            $10::uuid[], $11::timestamptz[], $12::bigint[], $13::text[], $15::text[], $16::int[], $17::boolean[], $18::text[], $19::text[], $20::text[])
     AS t(id, q, k, a, p, s, m, md, tc, ik, dl, tm, n, d, dl_left, ra, fail, lk, dn)
` + insertLimitSQL

// copyTaskColumns are the columns a workflow's insert writes through
// COPY, when it can (see insertWorkflow).
var copyTaskColumns = []string{"id", "queue", "kind", "args", "state", "priority", "max_attempts", "metadata", "trace_context",
	"idempotency_key", "deadline", "timeout_us", "workflow_id", "task_name", "depends_on", "dependents", "deps_left", "run_anyway"}

// InsertWorkflow implements queue.WorkflowInserter: it inserts p in a
// transaction of its own (bounded, as EnqueueMany's) and wakes the workers
// of the queues whose tasks are ready.
func (c *Client) InsertWorkflow(ctx context.Context, p queue.WorkflowParams) (queue.WorkflowResult, error) {
	var res queue.WorkflowResult
	var queues []string
	err := c.observeWorkflow(ctx, p, func(ctx context.Context, meta map[string]string) (int64, error) {
		tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: boundedBegin})
		if err != nil {
			return 0, fmt.Errorf("pgqueue: insert workflow: %w", err)
		}
		defer tx.Rollback(ctx)
		if res, queues, err = insertWorkflow(ctx, tx, p, meta, false); err != nil {
			return 0, err
		}
		if err := tx.Commit(ctx); err != nil {
			return 0, fmt.Errorf("pgqueue: insert workflow: commit: %w", err)
		}
		return int64(len(res.Tasks)), nil
	})
	if err != nil {
		return queue.WorkflowResult{}, err
	}
	if len(queues) > 0 {
		c.wakeAfterCommit(ctx, queues)
	}
	return res, nil
}

// InsertWorkflowTx is InsertWorkflow inside the caller's transaction: the
// workflow exists, and its ready tasks wake their workers, only if tx
// commits. Adding tasks to a running workflow locks the existing tasks
// they depend on until tx ends: keep tx short.
func (c *Client) InsertWorkflowTx(ctx context.Context, tx pgx.Tx, p queue.WorkflowParams) (queue.WorkflowResult, error) {
	var res queue.WorkflowResult
	err := c.observeWorkflow(ctx, p, func(ctx context.Context, meta map[string]string) (int64, error) {
		var err error
		res, _, err = insertWorkflow(ctx, tx, p, meta, true)
		return int64(len(res.Tasks)), err
	})
	return res, err
}

// observeWorkflow runs insert under the InsertHook, which sees the tasks'
// jobs.
func (c *Client) observeWorkflow(ctx context.Context, p queue.WorkflowParams, insert func(context.Context, map[string]string) (int64, error)) error {
	ps := make([]queue.EnqueueParams, len(p.Tasks))
	for i, t := range p.Tasks {
		ps[i] = t.Params
	}
	_, err := queue.Observe(ctx, c.cfg.InsertHook, ps, insert)
	return err
}

// insertWorkflow inserts p's tasks through tx and returns the queues of the
// tasks that are ready now, which it notifies in tx when notify is set.
func insertWorkflow(ctx context.Context, tx pgx.Tx, p queue.WorkflowParams, meta map[string]string, notify bool) (queue.WorkflowResult, []string, error) {
	fail := func(err error) (queue.WorkflowResult, []string, error) {
		return queue.WorkflowResult{}, nil, fmt.Errorf("pgqueue: insert workflow: %w", err)
	}
	if len(p.Tasks) == 0 {
		return fail(fmt.Errorf("%w: no tasks", queue.ErrInvalidWorkflow))
	}
	var id pgtype.UUID
	if p.ID == "" {
		if p.Name == "" {
			return fail(fmt.Errorf("%w: a new workflow needs a name", queue.ErrInvalidWorkflow))
		}
		id = newJobKey()
	} else if err := id.Scan(p.ID); err != nil {
		return fail(fmt.Errorf("%w: workflow ID %q is not a UUID", queue.ErrInvalidWorkflow, p.ID))
	}
	for i := range p.Tasks {
		t := p.Tasks[i].Params.WithDefaults()
		if err := t.Validate(); err != nil {
			return fail(fmt.Errorf("task %q: %w", p.Tasks[i].Name, err))
		}
		p.Tasks[i].Params = t
	}
	created := p.ID == ""
	if created {
		tag, err := tx.Exec(ctx, workflowRowSQL, id, p.Name)
		if err != nil {
			return fail(err)
		}
		if tag.RowsAffected() == 0 {
			return fail(errors.New("a drawn workflow ID is taken"))
		}
	} else {
		var exists bool
		if err := tx.QueryRow(ctx, workflowExistsSQL, id).Scan(&exists); err != nil {
			return fail(err)
		}
		if !exists {
			return fail(fmt.Errorf("%w: %s", queue.ErrWorkflowNotFound, p.ID))
		}
	}
	// The names of the new tasks and of the existing tasks they depend on.
	names := make([]string, 0, len(p.Tasks))
	deps := map[string]bool{}
	for _, t := range p.Tasks {
		names = append(names, t.Name)
		for _, d := range t.DependsOn {
			deps[d] = true
		}
	}
	taken := map[string]bool{}
	existing := map[string]existingTask{}
	if !created {
		rows, err := tx.Query(ctx, existingNamesSQL, id, names)
		if err != nil {
			return fail(err)
		}
		for rows.Next() {
			var n string
			if err := rows.Scan(&n); err != nil {
				rows.Close()
				return fail(err)
			}
			taken[n] = true
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fail(err)
		}
		var outside []string
		for d := range deps {
			outside = append(outside, d)
		}
		if existing, err = lockExistingTasks(ctx, tx, id, outside); err != nil {
			return fail(err)
		}
	}
	order, err := p.TopoOrder(func(name string) bool {
		if taken[name] {
			return true
		}
		_, ok := existing[name]
		return ok
	})
	if err != nil {
		return fail(err)
	}
	ids := make([]int64, 0, len(p.Tasks))
	rows, err := tx.Query(ctx, taskIDsSQL, len(p.Tasks))
	if err != nil {
		return fail(err)
	}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			rows.Close()
			return fail(err)
		}
		ids = append(ids, v)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fail(err)
	}
	taskID := make(map[string]int64, len(p.Tasks))
	for k, i := range order {
		taskID[p.Tasks[i].Name] = ids[k]
	}
	shared, sharedTC, err := encodeMetadata(nil, meta)
	if err != nil {
		return fail(err)
	}
	n := len(p.Tasks)
	var (
		q, k, nm, d, failed = make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
		dn                  = make([]*string, n)
		a, md, tc           = make([][]byte, n), make([][]byte, n), make([][]byte, n)
		pr                  = make([]int16, n)
		s, dl               = make([]*time.Time, n), make([]*time.Time, n)
		m, left             = make([]int32, n), make([]int32, n)
		tm                  = make([]*int64, n)
		ra                  = make([]bool, n)
		lk                  = make([]string, n)
		tid                 = make([]int64, n)
	)
	keys := newJobKeys(n)
	// Dependencies first: every task's dependents are then known before
	// the insert, which writes them with the rows rather than updating
	// each task that has some afterwards.
	newDependents := map[int64][]int64{}
	taskDeps := make([][]int64, n)
	position := make(map[string]int, n)
	for k2, i := range order {
		t := p.Tasks[i]
		tid[k2] = taskID[t.Name]
		position[t.Name] = k2
		taskDeps[k2] = make([]int64, 0, len(t.DependsOn))
		for _, dn := range t.DependsOn {
			if e, ok := existing[dn]; ok {
				taskDeps[k2] = append(taskDeps[k2], e.id)
				switch {
				case e.state == queue.StateCompleted:
				case e.state.Final() && t.RunAnyway:
				case e.state.Final():
					if failed[k2] == "" {
						failed[k2] = dn + `" was ` + string(e.state)
					}
				default:
					left[k2]++
				}
				newDependents[e.id] = append(newDependents[e.id], tid[k2])
				continue
			}
			dep := taskID[dn]
			taskDeps[k2] = append(taskDeps[k2], dep)
			newDependents[dep] = append(newDependents[dep], tid[k2])
			// A new task cancelled at insert (its own dependency had
			// failed) fails its dependents as a cancel would.
			switch {
			case failed[position[dn]] == "":
				left[k2]++
			case t.RunAnyway:
			case failed[k2] == "":
				failed[k2] = dn + `" was cancelled`
			}
		}
	}
	queues := map[string]bool{}
	now := time.Now()
	copyable := true
	for k2, i := range order {
		t := p.Tasks[i]
		tp := t.Params
		q[k2], k[k2], a[k2], pr[k2], m[k2] = tp.Queue, tp.Kind, tp.Args, int16(tp.Priority), int32(tp.MaxAttempts)
		nm[k2], ra[k2], lk[k2] = t.Name, t.RunAnyway, tp.LimitKey
		if !tp.ScheduledAt.IsZero() {
			at := tp.ScheduledAt
			s[k2] = &at
			copyable = false
		}
		copyable = copyable && failed[k2] == ""
		dl[k2], tm[k2] = deadlineParam(tp.Deadline), timeoutParam(tp.Timeout)
		md[k2], tc[k2] = shared, sharedTC
		if len(tp.Metadata) > 0 {
			if md[k2], tc[k2], err = encodeMetadata(tp.Metadata, meta); err != nil {
				return fail(fmt.Errorf("task %q: %w", t.Name, err))
			}
		}
		if left[k2] == 0 && failed[k2] == "" && !tp.ScheduledAt.After(now) {
			queues[tp.Queue] = true
		}
	}
	if copyable {
		// COPY cannot find a task's limit, nor read the database's clock:
		// tasks that a limit may govern, or scheduled ones, or cancelled
		// ones, go through insertTasksSQL.
		names := distinct(q)
		var limited bool
		if err := tx.QueryRow(ctx, limitedQueuesSQL, names).Scan(&limited); err != nil {
			return fail(fmt.Errorf("look up limits: %w", err))
		}
		copyable = !limited
	}
	// The names first: a name that another transaction has just given a
	// task of this workflow fails here, before any task is written.
	if err := copyTaskNames(ctx, tx, id, nm, tid); err != nil {
		return fail(err)
	}
	restore := func(context.Context) error { return nil }
	if hasLongList(taskDeps, newDependents, existing) {
		if restore, err = compressListsWithLZ4(ctx, tx); err != nil {
			return fail(err)
		}
	}
	if copyable {
		rows := make([][]any, n)
		for k2 := range rows {
			state, ready := queue.StatePending, left[k2] == 0
			if ready {
				state = queue.StateAvailable
			}
			var dependents []int64
			if ts, ok := newDependents[tid[k2]]; ok {
				dependents = ts
			}
			rows[k2] = []any{tid[k2], q[k2], k[k2], a[k2], string(state), pr[k2], m[k2], md[k2], tc[k2], keys[k2], dl[k2], tm[k2],
				id, nm[k2], taskDeps[k2], dependents, left[k2], ra[k2]}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"jobfence_jobs"}, copyTaskColumns, pgx.CopyFromRows(rows)); err != nil {
			return fail(fmt.Errorf("copy: %w", err))
		}
	} else {
		// insertTasksSQL takes the lists, of different lengths, as text.
		for k2 := range tid {
			d[k2] = int64Array(taskDeps[k2])
			if ts, ok := newDependents[tid[k2]]; ok {
				v := int64Array(ts)
				dn[k2] = &v
			}
		}
		if _, err := tx.Exec(ctx, insertTasksSQL, tid, q, k, a, pr, s, m, md, tc, keys, dl, tm, nm, id, d, left, ra, failed, lk, dn); err != nil {
			return fail(err)
		}
	}
	// Dependents on the existing tasks.
	var onOld []int64
	var onOldIDs []string
	isNew := make(map[int64]bool, n)
	for _, v := range tid {
		isNew[v] = true
	}
	for dep, ts := range newDependents {
		if !isNew[dep] {
			onOld, onOldIDs = append(onOld, dep), append(onOldIDs, int64Array(ts))
		}
	}
	if len(onOld) > 0 {
		if _, err := tx.Exec(ctx, addDependentsSQL, onOld, onOldIDs); err != nil {
			return fail(err)
		}
	}
	if err := restore(ctx); err != nil {
		return fail(err)
	}
	ready := make([]string, 0, len(queues))
	for qn := range queues {
		ready = append(ready, qn)
	}
	if notify && len(ready) > 0 {
		if _, err := tx.Exec(ctx, notifySQL, insertChannel, ready); err != nil {
			return fail(err)
		}
	}
	return queue.WorkflowResult{ID: uuidString(id), Tasks: taskID}, ready, nil
}

// existingTask is a task a new one depends on.
type existingTask struct {
	id    int64
	state queue.State
	// dependents is the length of its dependents list before the append.
	dependents int
}

// lockExistingTasks locks and reads the named tasks of workflow id (see
// existingTasksSQL).
func lockExistingTasks(ctx context.Context, tx pgx.Tx, id pgtype.UUID, names []string) (map[string]existingTask, error) {
	out := map[string]existingTask{}
	if len(names) == 0 {
		return out, nil
	}
	rows, err := tx.Query(ctx, existingTasksSQL, id, names)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var e existingTask
		var name, state string
		if err := rows.Scan(&e.id, &name, &state, &e.dependents); err != nil {
			return nil, err
		}
		e.state = queue.State(state)
		out[name] = e
	}
	return out, rows.Err()
}

// int64Array writes ids as a PostgreSQL array literal, for a column of
// arrays of different lengths passed as text.
func int64Array(ids []int64) string {
	var b strings.Builder
	b.WriteByte('{')
	for i, v := range ids {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(v, 10))
	}
	b.WriteByte('}')
	return b.String()
}

// uuidString formats u as a UUID's text.
func uuidString(u pgtype.UUID) string {
	return strings.TrimPrefix(jobKey(u), "jobfence-")
}

// distinct returns s's strings without repeats, in their first order: a
// look-up by the queues of a workflow or a batch takes each once, not once
// per job.
func distinct(s []string) []string {
	seen := make(map[string]bool)
	var out []string
	for _, v := range s {
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out
}
