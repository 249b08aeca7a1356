package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// LimitUse is a limit's use now, for the dashboard, `jobfence limits
// list` and metrics.
type LimitUse struct {
	Limit
	// InUse counts the concurrency slots held, over every partition.
	InUse int64
	// StartedInPeriod counts the rate slots granted within the last
	// Period, over every partition.
	StartedInPeriod int64
	// Waiting counts the jobs held back by the limit (limited), up to
	// the client's CountCap; WaitingCapped says the count stopped there.
	Waiting       int64
	WaitingCapped bool
	// Partitions counts the partitions that have slots.
	Partitions int64
}

// limitUseSQL reads each limit's use: its held concurrency slots (a slot
// row's holder checked as a grant checks it), rate slots granted within
// the period, and waiting jobs up to $1 (jobfence_jobs_limited serves the
// count).
var limitUseSQL = `
SELECT l.name,
    (SELECT count(*) FROM jobfence_limit_slots s JOIN jobfence_jobs j ON j.id = s.job_id
     WHERE s.name = l.name AND s.kind = 0 AND ` + holdsSQL + `),
    (SELECT count(*) FROM jobfence_limit_slots s
     WHERE s.name = l.name AND s.kind = 1 AND s.granted_at >= now() - l.period_us * interval '1 microsecond'),
    (SELECT count(*) FROM (SELECT FROM jobfence_jobs WHERE state = 'limited' AND limit_name = l.name LIMIT $1) w),
    (SELECT count(DISTINCT part) FROM jobfence_limit_slots s WHERE s.name = l.name)
FROM jobfence_limits l
ORDER BY l.name`

// LimitUses returns every limit with its use now. Waiting counts stop at
// the client's CountCap (WaitingCapped), so that a backlog of millions is not read
// whole.
func (c *Client) LimitUses(ctx context.Context) ([]LimitUse, error) {
	ls, err := c.Limits(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]*LimitUse{}
	out := make([]LimitUse, len(ls))
	for i, l := range ls {
		out[i].Limit = l
		byName[l.Name] = &out[i]
	}
	capN := int64(c.CountCap())
	rows, err := c.pool.Query(ctx, limitUseSQL, capN+1)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: limit use: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var name string
		var inUse, started, waiting, parts int64
		if err := rows.Scan(&name, &inUse, &started, &waiting, &parts); err != nil {
			return nil, fmt.Errorf("pgqueue: limit use: %w", err)
		}
		if u := byName[name]; u != nil {
			u.InUse, u.StartedInPeriod, u.Partitions = inUse, started, parts
			u.Waiting, u.WaitingCapped = min(waiting, capN), waiting > capN
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgqueue: limit use: %w", err)
	}
	return out, nil
}

// waitSQL reads why job $1 waits: its limit and partition, the slots of
// that partition held, the rate slots granted within the period, and the
// jobs of the partition ahead of it (up to $2).
var waitSQL = `
SELECT w.state, w.limit_name, w.limit_part, coalesce(l.concurrency, 0), coalesce(l.rate, 0), coalesce(l.period_us, 0),
    (SELECT count(*) FROM jobfence_limit_slots s JOIN jobfence_jobs j ON j.id = s.job_id
     WHERE s.name = w.limit_name AND s.part = w.limit_part AND s.kind = 0 AND ` + holdsSQL + `),
    (SELECT count(*) FROM jobfence_limit_slots s
     WHERE s.name = w.limit_name AND s.part = w.limit_part AND s.kind = 1
       AND s.granted_at >= now() - l.period_us * interval '1 microsecond'),
    (SELECT count(*) FROM (SELECT FROM jobfence_jobs a
     WHERE a.state = 'limited' AND a.limit_name = w.limit_name AND a.limit_part = w.limit_part AND a.id < w.id LIMIT $2) x),
    l.name IS NOT NULL
FROM jobfence_jobs w LEFT JOIN jobfence_limits l ON l.name = w.limit_name
WHERE w.id = $1`

// LimitWait is why a limited job waits (Client.LimitWait): its limit and
// partition and what holds the partition's slots.
type LimitWait struct {
	// Limit and Partition name the limit the job waits for and its
	// partition ("" for a limit with one partition).
	Limit, Partition string
	// LimitGone says the limit was deleted: the workers' next grant pass
	// releases the job.
	LimitGone bool
	// Concurrency and SlotsHeld: the partition's cap and the jobs that
	// hold its slots now (zero Concurrency: none).
	Concurrency, SlotsHeld int
	// Rate, Period and StartsInPeriod: the partition's rate and the
	// starts within the last Period (zero Rate: none).
	Rate           int
	Period         time.Duration
	StartsInPeriod int
	// Ahead is how many jobs of the partition wait ahead of it, counted up
	// to the client's CountCap; AheadCapped says there are more.
	Ahead       int64
	AheadCapped bool
}

// String says why the job waits, in a sentence for people.
func (w *LimitWait) String() string {
	if w.LimitGone {
		return fmt.Sprintf("waits on limit %q, which no longer exists: the workers' next grant pass releases it", w.Limit)
	}
	where := fmt.Sprintf("limit %q", w.Limit)
	if w.Partition != "" {
		where += fmt.Sprintf(", partition %s", w.Partition)
	}
	aheadText := fmt.Sprintf("%d", w.Ahead)
	if w.AheadCapped {
		aheadText = fmt.Sprintf("more than %d", w.Ahead)
	}
	var why []string
	if w.Concurrency > 0 {
		why = append(why, fmt.Sprintf("%d of %d slots held", w.SlotsHeld, w.Concurrency))
	}
	if w.Rate > 0 {
		why = append(why, fmt.Sprintf("%d of %d starts in the last %s", w.StartsInPeriod, w.Rate, w.Period))
	}
	return fmt.Sprintf("waits for a slot of %s: %s; %s jobs of the partition ahead of it", where, strings.Join(why, ", "), aheadText)
}

// LimitWait says why job id waits for a limit, or returns nil when it
// does not wait for one (it is not limited). An unknown ID wraps
// queue.ErrJobNotFound.
func (c *Client) LimitWait(ctx context.Context, id int64) (*LimitWait, error) {
	var (
		state                string
		name, part           *string
		conc, rate           int
		period               int64
		held, started, ahead int64
		exists               bool
	)
	capN := int64(c.CountCap())
	err := c.pool.QueryRow(ctx, waitSQL, id, capN+1).Scan(&state, &name, &part, &conc, &rate, &period, &held, &started, &ahead, &exists)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("pgqueue: job %d: %w", id, queue.ErrJobNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("pgqueue: why job %d waits: %w", id, err)
	}
	if queue.State(state) != queue.StateLimited || name == nil || part == nil {
		return nil, nil
	}
	return &LimitWait{
		Limit: *name, Partition: *part, LimitGone: !exists,
		Concurrency: conc, SlotsHeld: int(held),
		Rate: rate, Period: time.Duration(period) * time.Microsecond, StartsInPeriod: int(started),
		Ahead: min(ahead, capN), AheadCapped: ahead > capN,
	}, nil
}

// WaitReason says why job id waits for a limit, in a sentence for people
// (`jobfence jobs show`, the dashboard's job page): LimitWait's String,
// or "" when it does not wait for one. An unknown ID wraps
// queue.ErrJobNotFound.
func (c *Client) WaitReason(ctx context.Context, id int64) (string, error) {
	w, err := c.LimitWait(ctx, id)
	if err != nil || w == nil {
		return "", err
	}
	return w.String(), nil
}
