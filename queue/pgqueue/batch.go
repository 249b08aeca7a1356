package pgqueue

import (
	"context"
	"fmt"

	"github.com/jobfence/jobfence/queue"
)

// dependencyResultsSQL reads, for task $1, each of its direct
// dependencies (depends_on, in its order) as it is now: in jobfence_jobs,
// or moved to jobfence_jobs_finished by its completion or the retention;
// a dependency gone from both (pruned) comes back with a NULL state. Each
// dependency is a primary-key probe of each table.
const dependencyResultsSQL = `
SELECT u.id, coalesce(d.task_name, ''), coalesce(d.kind, ''), d.state, coalesce(d.attempt, 0), d.output,
       coalesce(d.errors -> -1 ->> 'error', '')
FROM jobfence_jobs me
CROSS JOIN LATERAL unnest(me.depends_on) WITH ORDINALITY AS u(id, ord)
LEFT JOIN LATERAL (
    SELECT j.task_name, j.kind, j.state::text AS state, j.attempt, j.output, j.errors FROM jobfence_jobs j WHERE j.id = u.id
  UNION ALL
    SELECT f.task_name, f.kind, f.state::text, f.attempt, f.output, f.errors FROM jobfence_jobs_finished f WHERE f.id = u.id
    LIMIT 1
) d ON true
WHERE me.id = $1
ORDER BY u.ord`

// jobExistsSQL tells a task without dependencies from a missing job.
const jobExistsSQL = `SELECT EXISTS (SELECT FROM jobfence_jobs WHERE id = $1)`

// DependencyResults returns how each direct dependency of task job ended
// (or stands, for one that has not ended), in the order of its
// DependsOn: its name, job, state, last attempt, output and last error.
// A batch's callback (workflow.NewBatch) reads its members through it. It
// returns an error wrapping queue.ErrJobNotFound when job is gone.
func (c *Client) DependencyResults(ctx context.Context, job int64) ([]queue.TaskResult, error) {
	rows, err := c.pool.Query(ctx, dependencyResultsSQL, job)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: dependency results of job %d: %w", job, err)
	}
	defer rows.Close()
	var out []queue.TaskResult
	for rows.Next() {
		var r queue.TaskResult
		var state *string
		if err := rows.Scan(&r.JobID, &r.Name, &r.Kind, &state, &r.Attempt, &r.Output, &r.Error); err != nil {
			return nil, fmt.Errorf("pgqueue: dependency results of job %d: %w", job, err)
		}
		if state != nil {
			r.State = queue.State(*state)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgqueue: dependency results of job %d: %w", job, err)
	}
	if len(out) == 0 {
		var found bool
		if err := c.pool.QueryRow(ctx, jobExistsSQL, job).Scan(&found); err != nil {
			return nil, fmt.Errorf("pgqueue: dependency results of job %d: %w", job, err)
		}
		if !found {
			return nil, fmt.Errorf("pgqueue: dependency results: %w: job %d", queue.ErrJobNotFound, job)
		}
	}
	return out, nil
}
