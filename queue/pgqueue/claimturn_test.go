package pgqueue_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestClaimTurnWaitIsBounded: while another session holds a queue's claim
// turn (an open transaction holding its advisory lock, as a claim in
// flight whose server session is stuck would), a claim waits for the turn
// at most about a second, then claims beside the holder; with the turn
// free it does not wait.
func TestClaimTurnWaitIsBounded(t *testing.T) {
	c, db := newClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range 5 {
		if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, pgqueue.ClaimTurnSQL, queue.DefaultQueue, 0); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	jobs := claim(t, c, queue.DefaultQueue, 1, time.Minute)
	waited := time.Since(began)
	if len(jobs) != 1 {
		t.Fatalf("claim while the turn was held took %d jobs, want 1", len(jobs))
	}
	if waited < 900*time.Millisecond || waited > 5*time.Second {
		t.Fatalf("claim while the turn was held returned after %v, want about a second (its turn's wait)", waited)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// The quickest of three claims: one that waited for the turn would
	// wait every time, a load spike on a busy machine slows one.
	quickest := time.Hour
	for range 3 {
		began = time.Now()
		if jobs := claim(t, c, queue.DefaultQueue, 1, time.Minute); len(jobs) != 1 {
			t.Fatalf("claim with the turn free took %d jobs, want 1", len(jobs))
		}
		quickest = min(quickest, time.Since(began))
	}
	if quickest > 900*time.Millisecond {
		t.Fatalf("the quickest of three claims with the turn free took %v, want no wait", quickest)
	}
}

// TestClaimTurnLeavesNoWarning: a claim's batch bounds its wait for the
// turn and then gives the claim the connection's own lock_timeout back,
// without a warning: the batch is a transaction but not a transaction
// block, where SET LOCAL made the server warn (and log) at every claim.
func TestClaimTurnLeavesNoWarning(t *testing.T) {
	db := pgtest.New(t)
	cfg, err := pgxpool.ParseConfig(db.URL)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["lock_timeout"] = "7s"
	var mu sync.Mutex
	var notices []string
	cfg.ConnConfig.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		notices = append(notices, n.Severity+": "+n.Message)
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The bound, then the connection's own value, within one batch.
	var b pgx.Batch
	b.Queue(pgqueue.ClaimTurnWaitSQL, 1000)
	b.Queue("SELECT current_setting('lock_timeout')")
	b.Queue(pgqueue.ClaimTurnWaitResetSQL)
	b.Queue("SELECT current_setting('lock_timeout')")
	br := pool.SendBatch(ctx, &b)
	var during, after string
	_, err = br.Exec()
	if err == nil {
		err = br.QueryRow().Scan(&during)
	}
	if err == nil {
		_, err = br.Exec()
	}
	if err == nil {
		err = br.QueryRow().Scan(&after)
	}
	if cerr := br.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	if during != "1s" || after != "7s" {
		t.Fatalf("lock_timeout in the batch: %q during the turn's wait and %q after it, want \"1s\" and \"7s\"", during, after)
	}

	c := pgqueue.New(pool, pgqueue.Config{})
	for range 3 {
		if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	if jobs := claim(t, c, queue.DefaultQueue, 2, time.Minute); len(jobs) != 2 {
		t.Fatalf("claim took %d jobs, want 2", len(jobs))
	}
	if jobs := claim(t, c, queue.DefaultQueue, 2, time.Minute); len(jobs) != 1 {
		t.Fatalf("second claim took %d jobs, want 1", len(jobs))
	}
	var show string
	if err := pool.QueryRow(ctx, "SHOW lock_timeout").Scan(&show); err != nil {
		t.Fatal(err)
	}
	if show != "7s" {
		t.Fatalf("lock_timeout after the claims: %q, want the connection's 7s", show)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notices) > 0 {
		t.Fatalf("the claims drew notices from the server: %q", notices)
	}
}
