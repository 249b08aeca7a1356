package pgqueue

import (
	"context"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// nextRefillSQL says, for the partitions ($1 names, $2 parts) that still
// have waiting jobs and whose rate is what holds them back (every rate slot
// is taken, none frees before a Period passes), in how many microseconds
// the earliest rate slot frees, by the database's clock. A slot whose job
// has not started yet frees a Period after that start, which no one knows
// yet: it is left out, and its job's start is followed by its outcome's
// grant. A partition that backs off (JobRateLimited) frees no slot
// before its backoff ends (greatest ignores a NULL backoff). It runs in a
// grant's transaction, after the grant, so it sees the slots that grant
// took.
//
// The partitions whose limit has a rate are found first (r, materialized),
// so that a grant of limits without one reads nothing else: planned as a
// join, it probed each partition's waiting jobs and slots before it
// dropped the partitions for want of a rate, a sixth of the server's
// statement time under 1,000 partitions of a concurrency limit
// (docs/benchmarks/limits.md).
var nextRefillSQL = `
WITH r AS MATERIALIZED (
    SELECT p.n, p.pt, l.rate, l.period_us
    FROM (SELECT DISTINCT n, pt FROM unnest($1::text[], $2::text[]) AS p(n, pt)) p
    JOIN jobfence_limits l ON l.name = p.n AND l.rate IS NOT NULL
)
SELECT r.n, r.pt, (extract(epoch FROM min(CASE WHEN j.state IS DISTINCT FROM 'available'
        THEN greatest(greatest(s.granted_at, j.attempted_at) + r.period_us * interval '1 microsecond', s.backoff_until) END) - now()) * 1e6)::bigint
FROM r
JOIN jobfence_limit_slots s ON s.name = r.n AND s.part = r.pt AND s.kind = 1 AND s.slot < r.rate
LEFT JOIN jobfence_jobs j ON j.id = s.job_id
WHERE EXISTS (SELECT FROM jobfence_jobs w WHERE w.state = 'limited'
    AND ` + waitingInSQL("w.", "r.n", "r.pt") + `)
GROUP BY r.n, r.pt
HAVING bool_and(s.granted_at IS NOT NULL) AND count(*) >= max(r.rate)
   AND min(CASE WHEN j.state IS DISTINCT FROM 'available'
        THEN greatest(greatest(s.granted_at, j.attempted_at) + r.period_us * interval '1 microsecond', s.backoff_until) END) > now()`

// maxRefills bounds the partitions a client remembers a refill time for;
// past it, the workers' grant pass (PromoteInterval) serves the rest.
const maxRefills = 10_000

// refills remembers, per partition that a rate holds back, when its next
// rate slot frees (by this process's clock), as this client's grants saw
// it, so that a worker grants then (GrantRefilled) rather than at its next
// pass: a rate of 50 a second otherwise sustained about 35.
type refills struct {
	mu  sync.Mutex
	due map[partition]time.Time
	// wake holds a value when a grant has learnt of a refill earlier
	// than the earliest known before.
	wake chan struct{}
}

// queueNextRefill adds nextRefillSQL to a grant's batch b.
func queueNextRefill(b *pgx.Batch, names, parts []string) {
	b.Queue(nextRefillSQL, names, parts)
}

// record reads nextRefillSQL's rows for the partitions ps that a grant
// served, forgetting those with no refill to wait for.
func (r *refills) record(ps []partition, rows pgx.Rows) error {
	now := time.Now()
	got := map[partition]time.Time{}
	for rows.Next() {
		var p partition
		var us int64
		if err := rows.Scan(&p.name, &p.part, &us); err != nil {
			return err
		}
		got[p] = now.Add(time.Duration(us) * time.Microsecond)
	}
	if err := rows.Err(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.due == nil {
		r.due = map[partition]time.Time{}
	}
	earliest := r.earliestLocked()
	for _, p := range ps {
		delete(r.due, p)
	}
	sooner := false
	for p, at := range got {
		if len(r.due) >= maxRefills {
			break
		}
		r.due[p] = at
		sooner = sooner || earliest.IsZero() || at.Before(earliest)
	}
	if sooner {
		select {
		case r.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

func (r *refills) earliestLocked() time.Time {
	var t time.Time
	for _, at := range r.due {
		if t.IsZero() || at.Before(t) {
			t = at
		}
	}
	return t
}

// takeDue removes and returns up to limit partitions whose refill time
// has come.
func (r *refills) takeDue(now time.Time, limit int) []partition {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ps []partition
	for p, at := range r.due {
		if len(ps) == limit {
			break
		}
		if !at.After(now) {
			ps = append(ps, p)
			delete(r.due, p)
		}
	}
	return ps
}

func (r *refills) earliest() time.Time {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.earliestLocked()
}

// GrantRefilled implements queue.RefillGranter: it grants in the
// partitions whose rate slots this client's grants saw free by now (each
// grant tells when a rate that holds jobs back next frees a slot), and
// returns the jobs it made available per queue and when the next known
// rate slot frees (zero: none known). A worker calls it at that time, so
// that a rate-limited job starts when the window lets it rather than at
// the next grant pass.
func (c *Client) GrantRefilled(ctx context.Context) (map[string]int, time.Time, error) {
	ps := c.refills.takeDue(time.Now(), grantBatch)
	if len(ps) == 0 {
		return nil, c.refills.earliest(), nil
	}
	byQueue, err := c.grant(ctx, ps)
	if err != nil {
		// Tried again at the workers' next grant pass, which finds
		// the partitions by their waiting jobs.
		return nil, c.refills.earliest(), err
	}
	return byQueue, c.refills.earliest(), nil
}

// Refills implements queue.RefillGranter: it holds a value when a grant
// learns of a rate slot that frees before the earliest known.
func (c *Client) Refills() <-chan struct{} { return c.refills.wake }
