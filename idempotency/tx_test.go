package idempotency_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

const chargesSQL = `CREATE TABLE charges (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, key text NOT NULL, fence bigint NOT NULL)`

func countRows(t *testing.T, ctx context.Context, pool *pgxpool.Pool, table string) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// charge is an operation whose effect is a row in charges.
func charge(key, response string) func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
	return func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		fence, _ := idempotency.FenceFrom(ctx)
		if _, err := tx.Exec(ctx, "INSERT INTO charges (key, fence) VALUES ($1, $2)", key, fence); err != nil {
			return nil, err
		}
		return []byte(response), nil
	}
}

func inTx(t *testing.T, ctx context.Context, pool *pgxpool.Pool, fn func(tx pgx.Tx) error, commit bool) error {
	t.Helper()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if err := fn(tx); err != nil {
		return err
	}
	if commit {
		return tx.Commit(ctx)
	}
	return tx.Rollback(ctx)
}

// TestDoTxCommitsWithCaller: the key, fn's writes and the stored response
// commit or roll back with the caller's transaction.
func TestDoTxCommitsWithCaller(t *testing.T) {
	tests := []struct {
		name       string
		commit     bool
		wantCharge int
	}{
		{"commit", true, 1},
		{"rollback", false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := pgtest.New(t)
			if _, err := db.Pool.Exec(ctx, chargesSQL); err != nil {
				t.Fatal(err)
			}
			s := idempotency.New(db.Pool, idempotency.Options{})
			err := inTx(t, ctx, db.Pool, func(tx pgx.Tx) error {
				got, err := s.DoTx(ctx, tx, "k", "fp", charge("k", "first"))
				if err == nil && string(got) != "first" {
					t.Fatalf("response %q", got)
				}
				return err
			}, tt.commit)
			if err != nil {
				t.Fatal(err)
			}
			if n := countRows(t, ctx, db.Pool, "charges"); n != tt.wantCharge {
				t.Fatalf("%d charges, want %d", n, tt.wantCharge)
			}
			_, err = s.Lookup(ctx, "k")
			if tt.commit != (err == nil) {
				t.Fatalf("key after %s: %v", tt.name, err)
			}
			// A retry: replays after a commit, runs fn after a rollback.
			err = inTx(t, ctx, db.Pool, func(tx pgx.Tx) error {
				got, err := s.DoTx(ctx, tx, "k", "fp", charge("k", "second"))
				want := map[bool]string{true: "first", false: "second"}[tt.commit]
				if err == nil && string(got) != want {
					t.Fatalf("retry response %q, want %q", got, want)
				}
				return err
			}, true)
			if err != nil {
				t.Fatal(err)
			}
			if n := countRows(t, ctx, db.Pool, "charges"); n != 1 {
				t.Fatalf("%d charges after the retry, want 1", n)
			}
		})
	}
}

// TestDoTxFailureKeepsTxUsable: fn's error and a refused key roll back only
// DoTx's savepoint; the caller's transaction goes on and commits.
func TestDoTxFailureKeepsTxUsable(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(ctx, chargesSQL); err != nil {
		t.Fatal(err)
	}
	s := idempotency.New(db.Pool, idempotency.Options{Scope: "tx"})
	errDeclined := errors.New("declined")
	err := inTx(t, ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := s.DoTx(ctx, tx, "failing", "fp", func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
			if _, err := charge("failing", "")(ctx, tx); err != nil {
				return nil, err
			}
			return nil, errDeclined
		})
		if err != errDeclined {
			t.Fatalf("DoTx error %v, want fn's error unchanged", err)
		}
		if _, err := s.DoTx(ctx, tx, "done", "fp", charge("done", "ok")); err != nil {
			return err
		}
		_, err = s.DoTx(ctx, tx, "done", "other-fp", charge("done", "again"))
		if !errors.Is(err, idempotency.ErrKeyReused) {
			t.Fatalf("reused key: %v", err)
		}
		_, err = tx.Exec(ctx, "INSERT INTO charges (key, fence) VALUES ('caller', 0)")
		return err
	}, true)
	if err != nil {
		t.Fatalf("the caller's transaction: %v", err)
	}
	var keys []string
	rows, _ := db.Pool.Query(ctx, "SELECT key FROM charges ORDER BY id")
	keys, err = pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(keys) != 2 || keys[0] != "done" || keys[1] != "caller" {
		t.Fatalf("charges %v (%v), want [done caller]", keys, err)
	}
	if _, err := s.Lookup(ctx, "failing"); !errors.Is(err, idempotency.ErrKeyNotFound) {
		t.Fatalf("failed key: %v, want ErrKeyNotFound", err)
	}
}

func TestDoTxBadInput(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	s := idempotency.New(db.Pool, idempotency.Options{})
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	fn := func(context.Context, pgx.Tx) ([]byte, error) { return nil, nil }
	tests := []struct {
		name string
		tx   pgx.Tx
		key  string
		fn   func(context.Context, pgx.Tx) ([]byte, error)
		want string
	}{
		{"nil tx", nil, "k", fn, "jobfence: idempotency: DoTx: tx is nil"},
		{"nil fn", tx, "k", nil, "jobfence: idempotency: DoTx: fn is nil"},
		{"empty key", tx, "", fn, "jobfence: invalid key: key is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := s.DoTx(ctx, tt.tx, tt.key, "fp", tt.fn)
			if err == nil || err.Error() != tt.want {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
}

// TestDoTxConcurrentCallerWaits: while one transaction holds a key, a second
// DoTx with the same key waits in Postgres; it then replays the response if
// the first committed, or runs fn itself if the first rolled back.
func TestDoTxConcurrentCallerWaits(t *testing.T) {
	tests := []struct {
		name     string
		commit   bool
		wantResp string
	}{
		{"first commits", true, "first"},
		{"first rolls back", false, "second"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := pgtest.New(t)
			if _, err := db.Pool.Exec(ctx, chargesSQL); err != nil {
				t.Fatal(err)
			}
			s := idempotency.New(db.Pool, idempotency.Options{})
			tx1, err := db.Pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer tx1.Rollback(ctx)
			if _, err := s.DoTx(ctx, tx1, "k", "fp", charge("k", "first")); err != nil {
				t.Fatal(err)
			}
			type result struct {
				resp []byte
				err  error
			}
			second := make(chan result, 1)
			go func() {
				var r result
				r.err = inTx(t, ctx, db.Pool, func(tx pgx.Tx) error {
					var err error
					r.resp, err = s.DoTx(ctx, tx, "k", "fp", charge("k", "second"))
					return err
				}, true)
				second <- r
			}()
			waitForLockWaiter(t, ctx, db.Pool)
			if tt.commit {
				err = tx1.Commit(ctx)
			} else {
				err = tx1.Rollback(ctx)
			}
			if err != nil {
				t.Fatal(err)
			}
			r := <-second
			if r.err != nil || string(r.resp) != tt.wantResp {
				t.Fatalf("second caller: %q, %v; want %q", r.resp, r.err, tt.wantResp)
			}
			if n := countRows(t, ctx, db.Pool, "charges"); n != 1 {
				t.Fatalf("%d charges, want 1", n)
			}
		})
	}
}

// waitForLockWaiter polls until some session of the test's database waits
// for a lock.
func waitForLockWaiter(t *testing.T, ctx context.Context, pool *pgxpool.Pool) {
	t.Helper()
	for {
		var waiting bool
		err := pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock' AND query LIKE '%jobfence_idempotency_keys%')`).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestDoTxWithTransactionalJob: a transactional job handler uses DoTx with
// the job's idempotency key and completes the job under its fence in the
// same transaction. Owner A's lease runs out while its transaction is open
// and B claims the job; A's fenced completion is refused, its transaction
// rolls back whole (the key and the charge with it), and B charges once.
func TestDoTxWithTransactionalJob(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(ctx, chargesSQL); err != nil {
		t.Fatal(err)
	}
	q := pgqueue.New(db.Pool, pgqueue.Config{Logger: slog.New(slog.DiscardHandler)})
	s := idempotency.New(db.Pool, idempotency.Options{Scope: "jobs"})
	if _, err := q.Enqueue(ctx, queue.EnqueueParams{Kind: "charge"}); err != nil {
		t.Fatal(err)
	}
	claim := func(lease time.Duration) *queue.Job {
		for {
			// A rescued job is retryable until promoted, as a worker would.
			if _, err := q.Promote(ctx, 10); err != nil {
				t.Fatal(err)
			}
			jobs, err := q.Claim(ctx, queue.ClaimParams{Queue: queue.DefaultQueue, Limit: 1, Lease: lease, WorkerID: t.Name()})
			if err != nil {
				t.Fatal(err)
			}
			if len(jobs) == 1 {
				return jobs[0]
			}
			if ctx.Err() != nil {
				t.Fatal("no job to claim")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	// handle is the transactional handler's body, up to its fenced completion.
	handle := func(tx pgx.Tx, job *queue.Job) ([]byte, error) {
		resp, err := s.DoTx(ctx, tx, job.IdempotencyKey(), "charge", charge(job.IdempotencyKey(), "charged"))
		if err != nil {
			return nil, err
		}
		return resp, q.CompleteTx(ctx, tx, job.Lease())
	}

	jobA := claim(300 * time.Millisecond)
	txA, err := q.BeginTx(ctx, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	defer txA.Rollback(ctx)
	if _, err := s.DoTx(ctx, txA, jobA.IdempotencyKey(), "charge", charge(jobA.IdempotencyKey(), "charged")); err != nil {
		t.Fatal(err)
	}
	// A stalls here. Its lease runs out, the job is rescued and B claims it.
	for {
		n, err := q.Rescue(ctx, queue.RescueParams{Limit: 10})
		if err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	jobB := claim(time.Minute)
	if jobB.ID != jobA.ID || jobB.Fence <= jobA.Fence || jobB.IdempotencyKey() != jobA.IdempotencyKey() {
		t.Fatalf("B claimed %+v after A's %+v", jobB.Lease(), jobA.Lease())
	}
	// A wakes and completes: refused, so A rolls back.
	if err := q.CompleteTx(ctx, txA, jobA.Lease()); !errors.Is(err, idempotency.ErrStaleFence) {
		t.Fatalf("A's completion: %v, want ErrStaleFence", err)
	}
	if err := txA.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	// B runs the handler, twice over (as after a crash between commit and
	// acknowledgement): one charge.
	for i := range 2 {
		err := inTx(t, ctx, db.Pool, func(tx pgx.Tx) error {
			resp, err := handle(tx, jobB)
			if i == 1 && errors.Is(err, idempotency.ErrStaleFence) {
				return nil // the job was already completed by the first run
			}
			if err == nil && string(resp) != "charged" {
				t.Fatalf("response %q", resp)
			}
			return err
		}, true)
		if err != nil {
			t.Fatalf("B's run %d: %v", i, err)
		}
	}
	var fence int64
	if err := db.Pool.QueryRow(ctx, "SELECT fence FROM charges").Scan(&fence); err != nil {
		t.Fatal(err)
	}
	if r, err := s.Lookup(ctx, jobB.IdempotencyKey()); err != nil || r.Fence != fence || string(r.Response) != "charged" {
		t.Fatalf("key %+v (%v), want the charge's fence %d", r, err, fence)
	}
	if n := countRows(t, ctx, db.Pool, "charges"); n != 1 {
		t.Fatalf("%d charges, want 1", n)
	}
	job, err := q.Get(ctx, jobB.ID)
	if err != nil || job.State != queue.StateCompleted {
		t.Fatalf("job %+v, %v", job, err)
	}
}
