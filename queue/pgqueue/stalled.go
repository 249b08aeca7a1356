package pgqueue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// DefaultStalledSession is the default of Config.StalledSession: a lock
// wait's bound (txbound.LockWait), long enough that a healthy client
// sending a large batch over a slow link is not taken for a frozen one.
const DefaultStalledSession = 30 * time.Second

// stalledSessionsSQL lists the sessions of this database that wait for
// their client (ClientRead) while a statement of theirs is active, inside
// a transaction that holds a lock on one of this schema's jobfence tables
// or indexes, or a queue's claim turn (claimTurnSQL's advisory lock,
// keyed by the jobs table), with what shows their progress: when their state last
// changed (each statement of a batch changes it as it starts) and the
// bytes a COPY has read.
//
// PostgreSQL arms its idle bound (idle_in_transaction_session_timeout)
// only once it has answered a whole batch: a client that stopped after
// sending part of one (the batch was larger than its socket's buffer when
// SIGSTOP or a paused VM froze it, or the network cut it off) leaves the
// server waiting for the rest, its transaction and every lock the
// statements before took held, with no timeout of the server's to end it.
// A session that waits for its client between two batches is idle, not
// active, and is the idle bound's.
const stalledSessionsSQL = `
SELECT a.pid, a.backend_start, a.state_change, coalesce(p.bytes_processed, -1),
    coalesce(a.application_name, ''), coalesce(a.usename::text, '')
FROM pg_stat_activity a
LEFT JOIN pg_stat_progress_copy p ON p.pid = a.pid
WHERE a.pid <> pg_backend_pid() AND a.datname = current_database()
  AND a.state = 'active' AND a.wait_event_type = 'Client' AND a.wait_event = 'ClientRead'
  AND a.xact_start IS NOT NULL
  AND EXISTS (
      SELECT FROM pg_locks l LEFT JOIN pg_class c ON c.oid = l.relation
      WHERE l.pid = a.pid AND l.granted
        AND (c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'jobfence_jobs'::regclass)
             AND c.relname LIKE 'jobfence\_%'
          OR l.locktype = 'advisory' AND l.classid = 'jobfence_jobs'::regclass::oid AND l.objsubid = 2))`

// endStalledSQL ends session $1 if it is still the one seen ($2 its
// start) and still waiting where it was seen ($3 its state's change, $4
// its COPY's bytes): a session that moved on in between is left alone.
const endStalledSQL = `
SELECT pg_terminate_backend(a.pid)
FROM pg_stat_activity a
LEFT JOIN pg_stat_progress_copy p ON p.pid = a.pid
WHERE a.pid = $1 AND a.backend_start = $2 AND a.state_change = $3 AND coalesce(p.bytes_processed, -1) = $4
  AND a.state = 'active' AND a.wait_event = 'ClientRead'`

// stalledSession is a session seen waiting for its client, and since
// when (this client's clock) it has been seen waiting at the same place.
type stalledSession struct {
	pid          int32
	backendStart time.Time
	stateChange  time.Time
	copied       int64
	app, user    string
	since        time.Time
}

// same says whether s and o are one session waiting at one place.
func (s stalledSession) same(o stalledSession) bool {
	return s.pid == o.pid && s.backendStart.Equal(o.backendStart) && s.stateChange.Equal(o.stateChange) && s.copied == o.copied
}

// stalledSessions remembers the sessions that EndStalledSessions last saw
// waiting, at most one per server process, so that a session is ended
// only after it was seen making no progress for a whole bound: a session
// seen once may have just finished a long statement, its client's next
// one on the way.
type stalledSessions struct {
	mu   sync.Mutex
	seen map[int32]stalledSession
	// version is the server's server_version_num, once read.
	version int
}

// minStalledVersion is the oldest server whose sessions EndStalledSessions
// ends: PostgreSQL 14 added pg_stat_progress_copy, without which a COPY
// that is still being sent cannot be told from one whose client stopped.
const minStalledVersion = 140000

// serverVersion returns the server's server_version_num, read once.
func (c *Client) serverVersion(ctx context.Context) (int, error) {
	c.stalled.mu.Lock()
	v := c.stalled.version
	c.stalled.mu.Unlock()
	if v != 0 {
		return v, nil
	}
	if err := c.pool.QueryRow(ctx, `SELECT current_setting('server_version_num')::int`).Scan(&v); err != nil {
		return 0, err
	}
	c.stalled.mu.Lock()
	defer c.stalled.mu.Unlock()
	if c.stalled.version == 0 && v < minStalledVersion {
		c.cfg.Logger.Info("pgqueue: sessions left holding jobfence's locks by a client stopped mid-batch are not ended on this server: it needs PostgreSQL 14 or later",
			"server_version_num", v)
	}
	c.stalled.version = v
	return v, nil
}

// observe records the sessions seen at now, keeping the time each was
// first seen where it still is, and returns those seen there for at least
// bound.
func (s *stalledSessions) observe(seen []stalledSession, now time.Time, bound time.Duration) []stalledSession {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := make(map[int32]stalledSession, len(seen))
	var due []stalledSession
	for _, ss := range seen {
		ss.since = now
		if prev, ok := s.seen[ss.pid]; ok && prev.same(ss) {
			ss.since = prev.since
		}
		next[ss.pid] = ss
		if now.Sub(ss.since) >= bound {
			due = append(due, ss)
		}
	}
	s.seen = next
	return due
}

// EndStalledSessions implements queue.SessionReaper: it ends the sessions
// that have waited for their client in the middle of a statement or a
// batch, inside a transaction holding a lock on jobfence's tables, without
// progress since Config.StalledSession ago (as this client saw them: a
// session is ended at a call at least that long after the call that first
// saw it there). Such a client is frozen or cut off: its transaction's
// locks (a job's row, a fan-in's, a limit's slot, a queue's claim turn)
// would otherwise stay held for as long as it stays so. Ending the session
// rolls its transaction back, as the idle bound does for one idle between
// statements. Each ended session is logged.
//
// Ending another role's session needs membership in that role or in
// pg_signal_backend: a session this role may not end is logged and left.
// On a server older than PostgreSQL 14 it ends none (logged once).
func (c *Client) EndStalledSessions(ctx context.Context) (int, error) {
	if c.cfg.StalledSession < 0 {
		return 0, nil
	}
	if v, err := c.serverVersion(ctx); err != nil {
		return 0, fmt.Errorf("pgqueue: find stalled sessions: %w", err)
	} else if v < minStalledVersion {
		return 0, nil
	}
	rows, err := c.pool.Query(ctx, stalledSessionsSQL)
	if err != nil {
		return 0, fmt.Errorf("pgqueue: find stalled sessions: %w", err)
	}
	seen, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (stalledSession, error) {
		var s stalledSession
		err := r.Scan(&s.pid, &s.backendStart, &s.stateChange, &s.copied, &s.app, &s.user)
		return s, err
	})
	if err != nil {
		return 0, fmt.Errorf("pgqueue: find stalled sessions: %w", err)
	}
	now := time.Now()
	ended := 0
	for _, s := range c.stalled.observe(seen, now, c.cfg.StalledSession) {
		var ok bool
		err := c.pool.QueryRow(ctx, endStalledSQL, s.pid, s.backendStart, s.stateChange, s.copied).Scan(&ok)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			// It moved on since it was seen.
		case err != nil && ctx.Err() != nil:
			return ended, fmt.Errorf("pgqueue: end stalled session %d: %w", s.pid, err)
		case err != nil:
			c.cfg.Logger.Warn("pgqueue: a session holds jobfence's locks while it waits for its client mid-batch, and could not be ended",
				"pid", s.pid, "application_name", s.app, "user", s.user, "waited", now.Sub(s.since).Round(time.Second), "err", err)
		case ok:
			ended++
			c.cfg.Logger.Warn("pgqueue: ended a session that held jobfence's locks while it waited for its client mid-batch (a client frozen or cut off)",
				"pid", s.pid, "application_name", s.app, "user", s.user, "waited", now.Sub(s.since).Round(time.Second))
		}
	}
	return ended, nil
}
