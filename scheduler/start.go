package scheduler

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Backoff of Start while the database is unreachable.
const (
	startBackoffMin = 100 * time.Millisecond
	startBackoffMax = 5 * time.Second
)

// Start records the schedules added in code in the schedules table (a
// changed definition replaces the stored one and is logged; a paused one
// stays paused), reads the schedules this instance fires (those it defines
// and those added at run time), enqueues the fires missed since the last
// enqueued fire as each schedule's catch-up policy says, and then runs the
// loop that enqueues each fire as it comes and reads the table for changes
// every Config.SyncInterval, until Stop is called or ctx ends.
//
// While the database cannot be reached (connections refused or timing out,
// the server starting up or shutting down), Start retries, with backoff
// from 100ms to 5s and a Warn log line per retry, until it succeeds or ctx
// ends: an instance that starts before its database is up still starts.
// Each statement is bounded by Config.EnqueueTimeout. Any other error is
// returned at once, and nothing runs: jobfence's tables missing (a
// *migrations.NotMigratedError, errors.Is ErrNotMigrated), an SQL error,
// or ctx's end. While Start retries, Add and Stop wait for it.
func (s *Scheduler) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopping {
		return ErrStopping
	}
	if s.started {
		return ErrStarted
	}
	backoff := startBackoffMin
	for attempt := 1; ; attempt++ {
		err := s.prepare(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil || !unreachable(err) {
			return fmt.Errorf("scheduler: start: %w", err)
		}
		s.logger.Warn("scheduler: start: database unreachable; retrying",
			"attempt", attempt, "retry_in", backoff, "error", err)
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("scheduler: start: %w (the database was unreachable: %v)", context.Cause(ctx), err)
		case <-t.C:
		}
		backoff = min(backoff*2, startBackoffMax)
	}
	runCtx, cancel := context.WithCancel(ctx)
	s.started, s.cancel = true, cancel
	s.stop, s.done = make(chan struct{}), make(chan struct{})
	go s.loop(runCtx, s.cfg.Now(), s.stop, s.done)
	return nil
}

// prepare checks that jobfence's tables are there, registers every
// schedule defined in code, reads the schedules this instance fires from
// the table and enqueues their missed fires. Each step may be repeated:
// registering is an upsert, and a fire is one job however often it is
// enqueued.
func (s *Scheduler) prepare(ctx context.Context) error {
	checkCtx, cancel := context.WithTimeout(ctx, s.cfg.EnqueueTimeout)
	err := s.client.Check(checkCtx)
	cancel()
	if err != nil {
		return err
	}
	now := s.cfg.Now()
	for _, sc := range s.defined {
		regCtx, cancel := context.WithTimeout(ctx, s.cfg.EnqueueTimeout)
		err := s.register(regCtx, sc, now)
		cancel()
		if err != nil {
			return err
		}
	}
	s.schedules = nil
	if err := s.sync(ctx, now, true); err != nil {
		return err
	}
	for _, sc := range s.schedules {
		if sc.paused {
			continue
		}
		fires, m := sc.catchUp.due(sc.spec, sc.cursor, time.Time{}, now)
		if len(fires) > 0 {
			err := s.enqueue(ctx, sc, fires)
			if errors.Is(err, errChanged) {
				// Changed since it was read: the loop reads it again.
				select {
				case s.kick <- struct{}{}:
				default:
				}
				continue
			}
			if err != nil {
				return fmt.Errorf("catch up: %w", err)
			}
		}
		s.logMissed(sc, m)
		sc.cursor, sc.fresh = later(sc.cursor, now), false
		sc.failures, sc.retryAt = 0, time.Time{}
	}
	return nil
}

// unreachable reports whether err says that the database could not be
// reached, or cannot serve yet, rather than that it refused the request:
// only the former is worth retrying. A deadline counts (a statement that
// ran out of EnqueueTimeout on a silent network); the caller checks that
// its own ctx has not ended.
func unreachable(err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "57P01", "57P02", "57P03", // shutting down, crashed, starting up
			"53300": // too many connections
			return true
		}
		return strings.HasPrefix(pgErr.Code, "08") // connection exception
	}
	var connectErr *pgconn.ConnectError
	var netErr net.Error
	return errors.As(err, &connectErr) || errors.As(err, &netErr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || pgconn.Timeout(err)
}
