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

// addEdgesSQL records the dependencies of new tasks on existing ones in
// jobfence_task_edges, never in the existing task's row: a caller's
// transaction (InsertWorkflowTx) that wrote that row would hold it until
// its commit, and every statement of the fleet that writes it (the
// heartbeat of the worker running the task, its completion, a rescue)
// would wait for that commit, unbounded. An edge is counted when the
// new task counted the dependency in its deps_left (it had not ended in
// this transaction's snapshot); the promoter's sweep (releaseAppendedSQL)
// releases a counted edge once its dependency has ended, whenever that
// is, and lists every edge's dependent in its dependency's dependents.
const addEdgesSQL = `
INSERT INTO jobfence_task_edges (dependency, dependent, counted)
SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::boolean[])`

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
// anyway, or one that runs only on a failure whose dependencies have all
// completed, cancelled at once (fail holds the reason).
//
// transition: insert
const insertTasksSQL = `
INSERT INTO jobfence_jobs (id, queue, kind, args, state, priority, scheduled_at, max_attempts, metadata, trace_context,
                           idempotency_key, deadline, timeout_us, workflow_id, task_name, depends_on, dependents, deps_left,
                           run_anyway, run_on_failure, dep_failed, errors, finalized_at, limit_name, limit_part, limit_fair)
OVERRIDING SYSTEM VALUE
SELECT id, q, k, a,
       CASE WHEN fail <> '' THEN 'cancelled' WHEN dl_left > 0 THEN 'pending' WHEN s > now() THEN 'scheduled'
            WHEN lim.name IS NOT NULL THEN 'limited' ELSE 'available' END,
       p, greatest(COALESCE(s, now()), now()), m, md, tc, ik, dl, tm, $14, n, d::bigint[], dn::bigint[], dl_left, ra, rof, df,
       CASE WHEN fail <> '' THEN jsonb_build_array(jsonb_build_object('attempt', 0, 'at', now(), 'error', fail))
            ELSE '[]'::jsonb END,
       CASE WHEN fail <> '' THEN now() END, lim.name, lim.part, lim.fair
FROM unnest($1::bigint[], $2::text[], $3::text[], $4::jsonb[], $5::smallint[], $6::timestamptz[], $7::int[], $8::jsonb[], $9::bytea[],
            $10::uuid[], $11::timestamptz[], $12::bigint[], $13::text[], $15::text[], $16::int[], $17::boolean[], $18::text[], $19::text[], $20::text[],
            $21::boolean[], $22::boolean[])
     AS t(id, q, k, a, p, s, m, md, tc, ik, dl, tm, n, d, dl_left, ra, fail, lk, dn, rof, df)
` + insertLimitSQL

// copyTaskColumns are the columns a workflow's insert writes through
// COPY, when it can (see insertWorkflow).
var copyTaskColumns = []string{"id", "queue", "kind", "args", "state", "priority", "max_attempts", "metadata", "trace_context",
	"idempotency_key", "deadline", "timeout_us", "workflow_id", "task_name", "depends_on", "dependents", "deps_left", "run_anyway",
	"run_on_failure", "dep_failed"}

// InsertWorkflow implements queue.WorkflowInserter: it inserts p in a
// transaction of its own (bounded, as EnqueueMany's) and wakes the workers
// of the queues whose tasks are ready.
func (c *Client) InsertWorkflow(ctx context.Context, p queue.WorkflowParams) (queue.WorkflowResult, error) {
	var res queue.WorkflowResult
	var queues []string
	err := c.observeWorkflow(ctx, p, func(ctx context.Context, meta map[string]string) (int64, error) {
		sp, err := c.sealTasks(p)
		if err != nil {
			return 0, err
		}
		tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: boundedBegin})
		if err != nil {
			return 0, fmt.Errorf("pgqueue: insert workflow: %w", err)
		}
		defer tx.Rollback(ctx)
		if res, queues, err = insertWorkflow(ctx, tx, sp, meta, false); err != nil {
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
// commits. Adding tasks to a running workflow locks none of the existing
// tasks they depend on: tx may stay open as long as the caller needs,
// and a dependency that ends meanwhile releases the new tasks within a
// promoter's interval of the later of its end and tx's commit.
func (c *Client) InsertWorkflowTx(ctx context.Context, tx pgx.Tx, p queue.WorkflowParams) (queue.WorkflowResult, error) {
	var res queue.WorkflowResult
	err := c.observeWorkflow(ctx, p, func(ctx context.Context, meta map[string]string) (int64, error) {
		sp, err := c.sealTasks(p)
		if err != nil {
			return 0, err
		}
		res, _, err = insertWorkflow(ctx, tx, sp, meta, true)
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
	_, err := c.observe(ctx, ps, insert)
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
	child := p.Parent.ID != 0
	switch {
	case p.ID == "" && child:
		return fail(fmt.Errorf("%w: a child workflow needs its ID drawn by the caller", queue.ErrInvalidWorkflow))
	case (p.ID == "" || child) && p.Name == "":
		return fail(fmt.Errorf("%w: a new workflow needs a name", queue.ErrInvalidWorkflow))
	case p.ID == "":
		id = newJobKey()
	default:
		if err := id.Scan(p.ID); err != nil {
			return fail(fmt.Errorf("%w: workflow ID %q is not a UUID", queue.ErrInvalidWorkflow, p.ID))
		}
	}
	for i := range p.Tasks {
		t := p.Tasks[i].Params.WithDefaults()
		if err := t.Validate(); err != nil {
			return fail(fmt.Errorf("task %q: %w", p.Tasks[i].Name, err))
		}
		if len(t.Tags) > 0 {
			return fail(fmt.Errorf("%w: task %q: workflow tasks carry no tags", queue.ErrInvalidWorkflow, p.Tasks[i].Name))
		}
		p.Tasks[i].Params = t
	}
	created := p.ID == "" || child
	if child {
		res, started, err := insertChildRow(ctx, tx, id, p)
		if err != nil || started {
			return res, nil, err
		}
	} else if created {
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
		if existing, err = readExistingTasks(ctx, tx, id, outside); err != nil {
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
	if len(ids) != len(p.Tasks) {
		return fail(fmt.Errorf("drew %d task IDs for %d tasks", len(ids), len(p.Tasks)))
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
		// rof and df are NULL but for a RunOnFailure task: whether it
		// runs on a failure, and whether a dependency failed already.
		rof, df = make([]*bool, n), make([]*bool, n)
		// depFailed[k2]: a dependency of the task at k2 failed already.
		depFailed = make([]bool, n)
		lk        = make([]string, n)
		// tid[k2] is the ID of the task at position k2 of order: the IDs
		// were drawn in ascending order for the tasks in that order.
		tid = ids
	)
	keys := newJobKeys(n)
	// Dependencies first: every task's dependents are then known before
	// the insert, which writes them with the rows rather than updating
	// each task that has some afterwards. The lists of all the tasks share
	// one array each way (a fan-in's 10,000 and the 10,000 lists of one),
	// indexed by position: at maps a new task's name to its position.
	at := make(map[string]int, n)
	listed := 0
	for k2, i := range order {
		at[p.Tasks[i].Name] = k2
		listed += len(p.Tasks[i].DependsOn)
	}
	taskDeps := make([][]int64, n)
	depsBack := make([]int64, 0, listed)
	dependentsOf := make([][]int64, n)
	// The edges from existing tasks to new ones (addEdgesSQL).
	var edgeFrom, edgeTo []int64
	var edgeCounted []bool
	// depAt holds, for each dependency listed (tasks in order, each's list
	// in its order), the position of the new task it names, or -1 for an
	// existing task: looked up once, for the counts and the lists.
	count := make([]int, n)
	depAt := make([]int, 0, listed)
	for _, i := range order {
		for _, dn := range p.Tasks[i].DependsOn {
			dk := -1
			if _, ok := existing[dn]; !ok {
				dk = at[dn]
				count[dk]++
			}
			depAt = append(depAt, dk)
		}
	}
	dependentsBack := make([]int64, 0, listed)
	for k2, c := range count {
		if c > 0 {
			dependentsOf[k2] = carve(&dependentsBack, c)
		}
	}
	for k2, i := range order {
		t := p.Tasks[i]
		taskDeps[k2] = carve(&depsBack, len(t.DependsOn))
		for _, dn := range t.DependsOn {
			dk := depAt[0]
			depAt = depAt[1:]
			if dk < 0 {
				e := existing[dn]
				taskDeps[k2] = append(taskDeps[k2], e.id)
				counted := false
				switch {
				case e.state == queue.StateCompleted:
				case e.state.Final() && t.RunAnyway:
				case e.state.Final() && t.RunOnFailure:
					depFailed[k2] = true
				case e.state.Final():
					// Counted as not released, so that a Retry of the
					// task alone is refused (ErrDependenciesPending).
					left[k2]++
					if failed[k2] == "" {
						failed[k2] = dependencyFailed(dn, string(e.state))
					}
				default:
					left[k2]++
					counted = true
				}
				edgeFrom, edgeTo, edgeCounted = append(edgeFrom, e.id), append(edgeTo, tid[k2]), append(edgeCounted, counted)
				continue
			}
			taskDeps[k2] = append(taskDeps[k2], tid[dk])
			dependentsOf[dk] = append(dependentsOf[dk], tid[k2])
			// A new task cancelled at insert (its own dependency had
			// failed) fails its dependents as a cancel would.
			switch {
			case failed[dk] == "":
				left[k2]++
			case t.RunAnyway:
			case t.RunOnFailure:
				depFailed[k2] = true
			default:
				left[k2]++
				if failed[k2] == "" {
					failed[k2] = dependencyFailed(dn, string(queue.StateCancelled))
				}
			}
		}
		// A compensation whose dependencies have all completed already
		// is cancelled at once, as its last one's release would cancel it.
		if t.RunOnFailure && left[k2] == 0 && !depFailed[k2] && failed[k2] == "" {
			failed[k2] = noFailureReason
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
		if t.RunOnFailure {
			yes, f := true, depFailed[k2]
			rof[k2], df[k2] = &yes, &f
		}
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
	if hasLongList(taskDeps, dependentsOf) {
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
			rows[k2] = []any{tid[k2], q[k2], k[k2], a[k2], string(state), pr[k2], m[k2], md[k2], tc[k2], keys[k2], dl[k2], tm[k2],
				id, nm[k2], taskDeps[k2], dependentsOf[k2], left[k2], ra[k2], rof[k2], df[k2]}
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"jobfence_jobs"}, copyTaskColumns, pgx.CopyFromRows(rows)); err != nil {
			return fail(fmt.Errorf("copy: %w", err))
		}
	} else {
		// insertTasksSQL takes the lists, of different lengths, as text.
		for k2 := range tid {
			d[k2] = int64Array(taskDeps[k2])
			if ts := dependentsOf[k2]; ts != nil {
				v := int64Array(ts)
				dn[k2] = &v
			}
		}
		if _, err := tx.Exec(ctx, insertTasksSQL, tid, q, k, a, pr, s, m, md, tc, keys, dl, tm, nm, id, d, left, ra, failed, lk, dn, rof, df); err != nil {
			return fail(err)
		}
	}
	// Dependents on the existing tasks.
	if len(edgeFrom) > 0 {
		if _, err := tx.Exec(ctx, addEdgesSQL, edgeFrom, edgeTo, edgeCounted); err != nil {
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

// dependencyFailed is the error recorded on a task cancelled because its
// dependency name ended in state (discarded or cancelled), as
// releaseUpdate writes it.
func dependencyFailed(name, state string) string {
	return `jobfence: dependency failed: task "` + name + `" was ` + state + `; cancelled`
}

// carve returns the next n entries of *back, which has room for them, as
// an empty slice of capacity n whose appends fill them, and takes them
// from *back: lists carved from one array are one allocation.
func carve(back *[]int64, n int) []int64 {
	l := len(*back)
	*back = (*back)[:l+n]
	return (*back)[l : l : l+n]
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
