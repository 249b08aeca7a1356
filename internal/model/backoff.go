package model

import (
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// backoffReport is what the model learns, before it sends a rate-limited
// outcome (OpRateLimited), to check the backoff the outcome sets: the
// partition, the database's clock before the outcome (its backoff ends
// no earlier than that plus the Retry-After), and the jobs of the
// partition that were granted and had not started then, which may
// start during the backoff (a grant made before it is not taken back:
// docs/limits.md).
type backoffReport struct {
	key     string
	until   time.Time
	granted []int64
}

// partKey names a limit's partition in the model's maps.
func partKey(limit, part string) string { return limit + "/" + part }

// beforeBackoff reads what a rate-limited outcome of j with a Retry-After
// of d is checked against; nil where it could not (the step ends). A job
// no limit governs backs nothing off: an empty report.
func (r *runner) beforeBackoff(j *queue.Job, d time.Duration) *backoffReport {
	bo := &backoffReport{}
	l := r.s.limits[j.Limit]
	if j.Limit == "" || l == nil || l.deleted {
		return bo
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	var now time.Time
	err := r.admin.QueryRow(ctx, `SELECT now(), coalesce((SELECT array_agg(id) FROM jobfence_jobs
        WHERE limit_name = $1 AND limit_part = $2 AND state = 'available'), '{}')`, j.Limit, j.LimitPartition).Scan(&now, &bo.granted)
	if !r.called("read the partition before a 429", err, nil) {
		return nil
	}
	bo.key, bo.until = partKey(j.Limit, j.LimitPartition), now.Add(d)
	return bo
}

// backedOff records an applied rate-limited outcome: its partition
// grants nothing before bo.until (a later report extends it, an earlier
// one leaves it); the jobs already granted are exempt.
func (s *state) backedOff(bo *backoffReport) {
	if bo.key == "" {
		return
	}
	if bo.until.After(s.backoffs[bo.key]) {
		s.backoffs[bo.key] = bo.until
	}
	for _, id := range bo.granted {
		s.exempt[id] = true
	}
}

// checkBackoff: a job of a limit's partition starts no earlier than the
// end of the partition's backoff, by the database's clock (the claim's
// attempted_at), unless a grant made before the backoff began made it
// available. Each exemption serves one start.
func (r *runner) checkBackoff(j *queue.Job) {
	exempt := r.s.exempt[j.ID]
	delete(r.s.exempt, j.ID)
	until, ok := r.s.backoffs[partKey(j.Limit, j.LimitPartition)]
	if !ok || exempt || !j.AttemptedAt.Before(until) {
		return
	}
	r.fail("backoff", "job %d of %s started at %s, before its partition's backoff ended at %s (%s)", j.ID,
		partKey(j.Limit, j.LimitPartition), j.AttemptedAt.Format("15:04:05.000"), until.Format("15:04:05.000"),
		fmt.Sprint(until.Sub(j.AttemptedAt)))
}
