package pgqueue_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestPgBouncerExecModes: through PgBouncer 1.18 in transaction mode with
// one server connection, two client connections of one pool run the
// client's statements (enqueue, claim, heartbeat, finish, a transactional
// completion). pgx's default mode prepares named statements, which the
// second client finds already prepared on the shared server connection;
// exec mode and the simple protocol send args as their Go types, so a
// []byte for a jsonb column arrives as bytea text. The describing modes
// work: docs/pgbouncer.md recommends cache_describe.
func TestPgBouncerExecModes(t *testing.T) {
	db := pgtest.NewBounced(t, pgtest.BouncedOptions{PoolSize: 1})
	for _, tt := range []struct {
		mode    string
		wantErr string
	}{
		{"cache_statement", "already exists"},
		{"exec", "invalid input syntax for type json"},
		{"cache_describe", ""},
		{"describe_exec", ""},
		{"simple_protocol", "invalid input syntax for type json"},
	} {
		t.Run(tt.mode, func(t *testing.T) {
			err := roundTrips(t, db.BouncedURL, tt.mode)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("%s through PgBouncer: %v", tt.mode, err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("%s through PgBouncer: %v, want an error containing %q", tt.mode, err, tt.wantErr)
			}
		})
	}
}

// modePool opens a pool of maxConns connections on url in pgx's
// default_query_exec_mode mode, closed when the test ends.
func modePool(t *testing.T, rawURL, mode string, maxConns int32) *pgxpool.Pool {
	t.Helper()
	u, err := url.Parse(rawURL)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("default_query_exec_mode", mode)
	u.RawQuery = q.Encode()
	cfg, err := pgxpool.ParseConfig(u.String())
	if err != nil {
		t.Fatal(err)
	}
	cfg.MaxConns = maxConns
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// roundTrips runs the client's statements in mode on two client
// connections held at once, so that both use PgBouncer's server
// connection in turn.
func roundTrips(t *testing.T, bounced, mode string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := modePool(t, bounced, mode, 4)
	a, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer a.Release()
	b, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer b.Release()
	for _, conn := range []*pgxpool.Conn{a, b} {
		if _, err := conn.Exec(ctx, `SELECT count(*) FROM jobfence_jobs WHERE queue = $1`, "x"); err != nil {
			return err
		}
	}
	a.Release()
	b.Release()
	c := pgqueue.New(pool, pgqueue.Config{PollOnly: true})
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: mode, Args: []byte(`{"a":1}`)}); err != nil {
		return err
	}
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: mode, Args: []byte(`{"a":2}`)}); err != nil {
		return err
	}
	jobs, err := c.Claim(ctx, queue.ClaimParams{Queue: mode, Limit: 2, Lease: time.Minute, WorkerID: "w"})
	if err != nil {
		return err
	}
	if len(jobs) != 2 {
		t.Fatalf("claimed %d jobs, want 2", len(jobs))
	}
	if lost, err := c.Heartbeat(ctx, []queue.Lease{jobs[0].Lease()}, time.Minute); err != nil || len(lost) != 0 {
		t.Fatalf("heartbeat: lost %v, %v", lost, err)
	}
	if stale, err := c.Finish(ctx, []queue.Finish{{Lease: jobs[0].Lease(), Outcome: queue.OutcomeComplete}}); err != nil || len(stale) != 0 {
		t.Fatalf("finish: stale %v, %v", stale, err)
	}
	tx, err := c.BeginTx(ctx, time.Minute)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if err := c.CompleteTx(ctx, tx, jobs[1].Lease()); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// TestPgBouncerEnqueueWakes: through PgBouncer 1.18 in transaction mode,
// in the describing modes docs/pgbouncer.md recommends, Enqueue's batch
// of two transactions (the insert, then its wake-up) stays on one server
// connection while several clients share it: every job is inserted, and
// every wake-up reaches a listener on the server.
func TestPgBouncerEnqueueWakes(t *testing.T) {
	b := pgtest.NewBounced(t, pgtest.BouncedOptions{PoolSize: 1})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ln, err := b.DB.Pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Release()
	if _, err := ln.Exec(ctx, "LISTEN jobfence_insert"); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{"cache_describe", "describe_exec"} {
		c := pgqueue.New(modePool(t, b.BouncedURL, mode, 4), pgqueue.Config{PollOnly: true})
		const producers, each = 4, 25
		errs := make(chan error, producers)
		for p := range producers {
			go func() {
				for i := range each {
					name := fmt.Sprintf("%s-%s-%d", b.DB.Schema, mode, p*each+i)
					if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: name}); err != nil {
						errs <- fmt.Errorf("enqueue to %s: %w", name, err)
						return
					}
				}
				errs <- nil
			}()
		}
		for range producers {
			if err := <-errs; err != nil {
				t.Fatalf("%s through PgBouncer: %v", mode, err)
			}
		}
		want := map[string]bool{}
		for i := range producers * each {
			want[fmt.Sprintf("%s-%s-%d", b.DB.Schema, mode, i)] = true
		}
		for len(want) > 0 {
			n, err := ln.Conn().WaitForNotification(ctx)
			if err != nil {
				t.Fatalf("%s: %d wake-ups not heard: %v", mode, len(want), err)
			}
			delete(want, n.Payload)
		}
	}
	var n int
	if err := b.DB.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs`).Scan(&n); err != nil || n != 200 {
		t.Fatalf("%d jobs stored, %v; want 200", n, err)
	}
}

// TestPgBouncerMigrations: jobfence's migrations run through PgBouncer in
// transaction mode (down to nothing and up again), in docs/pgbouncer.md's exec
// mode, as the role whose default search_path is the schema.
func TestPgBouncerMigrations(t *testing.T) {
	db := pgtest.NewBounced(t, pgtest.BouncedOptions{PoolSize: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := migrations.Reset(ctx, db.BouncedURL); err != nil {
		t.Fatalf("reset through PgBouncer: %v", err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_tables WHERE schemaname = $1 AND tablename = 'jobfence_jobs'`, db.Schema).Scan(&n); err != nil || n != 0 {
		t.Fatalf("after reset: %d jobs tables, %v", n, err)
	}
	if err := migrations.Up(ctx, db.BouncedURL); err != nil {
		t.Fatalf("up through PgBouncer: %v", err)
	}
	c := pgqueue.New(db.BouncedPool(t, 2), pgqueue.Config{PollOnly: true})
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Args: []byte(`{}`)}); err != nil {
		t.Fatalf("enqueue after migrating through PgBouncer: %v", err)
	}
}
