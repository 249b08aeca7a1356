package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TriggerWindow is how long after a Trigger of a schedule a second Trigger
// of it enqueues nothing and returns the first one's job: a double click,
// or the same "run now" sent by two instances, makes one job.
const TriggerWindow = 5 * time.Second

// triggerSQL locks the schedule's row and reads its definition, the fire
// time of a trigger now (the database's clock, to the second), and the
// previous trigger's fire time if it is within TriggerWindow ($2).
const triggerSQL = `
SELECT kind, args, queue, coalesce(priority, 0), coalesce(max_attempts, 0), date_trunc('second', now()),
       CASE WHEN triggered_at > now() - $2::bigint * interval '1 microsecond' THEN triggered_at END
FROM jobfence_schedules WHERE name = $1 FOR NO KEY UPDATE`

const triggeredSQL = `UPDATE jobfence_schedules SET triggered_at = $2 WHERE name = $1`

// Trigger enqueues one fire of the schedule name now ("run now"), through
// client, whatever its spec, also while it is paused, and returns it: a
// job of the schedule's kind, args and options, at the database's clock to
// the second, keyed TriggerKey (cron:<name>:<Unix time>-run), so that it is
// a job of its own beside a fire of the spec in the same second, and
// SkipIfRunning counts it as a run of the schedule. A second Trigger
// within TriggerWindow enqueues nothing and returns the first one's job,
// with Inserted false: a double click, or the same request sent by two
// instances at once, makes one job (the schedule's row, locked, orders
// them). A handler knows a triggered run by FireOf's Fire.Triggered. It
// returns an error wrapping ErrNotFound when there is no such schedule.
func Trigger(ctx context.Context, client *pgqueue.Client, name string) (Fire, error) {
	return trigger(ctx, client, name, DefaultEnqueueTimeout)
}

// Trigger is the package's Trigger through this Scheduler's client, its
// transaction bounded by Config.EnqueueTimeout. Config.OnFire is not
// called for it.
func (s *Scheduler) Trigger(ctx context.Context, name string) (Fire, error) {
	return trigger(ctx, s.client, name, s.cfg.EnqueueTimeout)
}

func trigger(ctx context.Context, client *pgqueue.Client, name string, timeout time.Duration) (Fire, error) {
	fail := func(err error) (Fire, error) { return Fire{}, fmt.Errorf("scheduler: trigger %q: %w", name, err) }
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tx, err := client.Pool().BeginTx(ctx, pgx.TxOptions{BeginQuery: fireBounds(timeout)})
	if err != nil {
		return fail(err)
	}
	defer tx.Rollback(ctx)
	var p queue.EnqueueParams
	var args []byte
	var at time.Time
	var previous *time.Time
	err = tx.QueryRow(ctx, triggerSQL, name, TriggerWindow.Microseconds()).Scan(
		&p.Kind, &args, &p.Queue, &p.Priority, &p.MaxAttempts, &at, &previous)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return fail(ErrNotFound)
	case err != nil:
		return fail(err)
	case previous != nil:
		f := Fire{Schedule: name, At: previous.UTC(), Triggered: true}
		if err := tx.QueryRow(ctx, `SELECT id FROM jobfence_jobs WHERE unique_key = $1`, TriggerKey(name, f.At)).Scan(&f.JobID); err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return fail(err)
		}
		return f, nil
	case args == nil:
		return fail(fmt.Errorf("%w: it was registered by a jobfence release that did not store its arguments; start an instance of this release that defines it, or Put it", ErrInvalidOptions))
	}
	at = at.UTC()
	p.Args, p.ScheduledAt, p.UniqueKey = json.RawMessage(args), at, TriggerKey(name, at)
	p = p.WithDefaults()
	res, err := client.EnqueueTx(ctx, tx, p)
	if err != nil {
		return fail(err)
	}
	if _, err := tx.Exec(ctx, triggeredSQL, name, at); err != nil {
		return fail(err)
	}
	if err := tx.Commit(ctx); err != nil {
		return fail(err)
	}
	return Fire{Schedule: name, At: at, JobID: res.ID, Inserted: res.Inserted, Triggered: true}, nil
}
