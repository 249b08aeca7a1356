package idempotency_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testchild"
)

// ledgerSQL is a user's own table whose row records the fence of its last
// writer; writeLedgerSQL is the user's fenced write to it.
const (
	ledgerSQL      = `CREATE TABLE ledger (id int PRIMARY KEY, owner text NOT NULL, fence bigint NOT NULL); INSERT INTO ledger VALUES (1, 'nobody', 0)`
	writeLedgerSQL = `UPDATE ledger SET owner = $1, fence = $2 WHERE id = 1 AND fence <= $2`
)

func readLedger(t *testing.T, ctx context.Context, pool *pgxpool.Pool) (owner string, fence int64) {
	t.Helper()
	if err := pool.QueryRow(ctx, "SELECT owner, fence FROM ledger WHERE id = 1").Scan(&owner, &fence); err != nil {
		t.Fatal(err)
	}
	return owner, fence
}

// TestPauseInProcess: owner A claims a key with fence 33 and stalls past its
// lease (its lease is a hard deadline here, standing in for a paused
// process); B takes the key over with a greater fence, writes its row and
// its result and completes. A then wakes and writes: its row write, its
// result write and its completion all fail with ErrStaleFence, and B's
// values stand.
func TestPauseInProcess(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(ctx, ledgerSQL+`; SELECT setval('jobfence_fence_seq', 32)`); err != nil {
		t.Fatal(err)
	}
	results := idempotency.NewResultStore(db.Pool, "pause")
	a := idempotency.New(db.Pool, idempotency.Options{Scope: "pause", Lease: time.Second, Heartbeat: -1})
	rec := newLogRecorder()
	b := idempotency.New(db.NewPool(t, 4), idempotency.Options{
		Scope: "pause", WaitForInProgress: true, PollInterval: 20 * time.Millisecond, Logger: rec.Logger(),
	})

	claimed := make(chan int64)
	wake := make(chan struct{})
	type outcome struct {
		ledgerErr, resultErr, doErr error
	}
	aDone := make(chan outcome, 1)
	go func() {
		var o outcome
		_, o.doErr = a.Do(ctx, "job-7", "fp", func(ctx context.Context) ([]byte, error) {
			fence, _ := idempotency.FenceFrom(ctx)
			claimed <- fence
			<-wake // A is "paused" here, past its lease
			// A zombie does not look at ctx; the fence stops its writes anyway.
			o.ledgerErr = idempotency.Fenced(db.Pool.Exec(context.Background(), writeLedgerSQL, "A", fence))
			o.resultErr = results.Put(context.Background(), "job-7", fence, []byte("A"))
			return []byte("A"), nil
		})
		aDone <- o
	}()
	fenceA := <-claimed
	if fenceA != 33 {
		t.Fatalf("A's fence %d, want 33", fenceA)
	}

	var fenceB int64
	got, err := b.Do(ctx, "job-7", "fp", func(ctx context.Context) ([]byte, error) {
		fenceB, _ = idempotency.FenceFrom(ctx)
		if err := idempotency.Fenced(db.Pool.Exec(ctx, writeLedgerSQL, "B", fenceB)); err != nil {
			return nil, err
		}
		if err := results.Put(ctx, "job-7", fenceB, []byte("B")); err != nil {
			return nil, err
		}
		return []byte("B"), nil
	})
	if err != nil || string(got) != "B" {
		t.Fatalf("B: %q, %v", got, err)
	}
	if fenceB <= fenceA {
		t.Fatalf("B's fence %d is not greater than A's %d", fenceB, fenceA)
	}
	if rec.count(msgTookOver) != 1 {
		t.Fatalf("B logged %d takeovers, want 1", rec.count(msgTookOver))
	}

	close(wake)
	o := <-aDone
	for name, err := range map[string]error{"ledger write": o.ledgerErr, "result put": o.resultErr, "completion": o.doErr} {
		if !errors.Is(err, idempotency.ErrStaleFence) {
			t.Errorf("A's %s: %v, want ErrStaleFence", name, err)
		}
	}
	var sf *idempotency.StaleFenceError
	if !errors.As(o.doErr, &sf) || sf.Fence != fenceA || sf.Key != "job-7" {
		t.Fatalf("A's completion error %v, want a *StaleFenceError with fence %d", o.doErr, fenceA)
	}
	wantMsg := `jobfence: key "job-7" (scope "pause"): fence 33 is stale: the claim was lost to a newer owner; nothing was written`
	if o.doErr.Error() != wantMsg {
		t.Fatalf("error text %q, want %q", o.doErr, wantMsg)
	}

	if owner, fence := readLedger(t, ctx, db.Pool); owner != "B" || fence != fenceB {
		t.Fatalf("ledger %s/%d, want B/%d", owner, fence, fenceB)
	}
	res, err := results.Get(ctx, "job-7")
	if err != nil || string(res.Value) != "B" || res.Fence != fenceB {
		t.Fatalf("result %+v, %v", res, err)
	}
	r, err := a.Lookup(ctx, "job-7")
	if err != nil || r.State != idempotency.StateCompleted || string(r.Response) != "B" || r.Fence != fenceB {
		t.Fatalf("key %+v, %v", r, err)
	}
}

// TestDoHeartbeatKeepsSlowCaller shows the other side of the lease: a caller
// that is slow but alive keeps extending its lease, so a retry meanwhile is
// told the key is in progress instead of taking it over.
func TestDoHeartbeatKeepsSlowCaller(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	s := idempotency.New(db.Pool, idempotency.Options{Lease: 1500 * time.Millisecond, Heartbeat: 100 * time.Millisecond})
	held := make(chan struct{})
	release := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := s.Do(ctx, "slow", "fp", func(context.Context) ([]byte, error) {
			close(held)
			<-release
			return []byte("slow"), nil
		})
		done <- err
	}()
	<-held
	// Outlive several leases; every look finds the key still held.
	start := time.Now()
	for time.Since(start) < 4*time.Second {
		_, err := s.Do(ctx, "slow", "fp", func(context.Context) ([]byte, error) { return nil, errors.New("took over a live caller") })
		if !errors.Is(err, idempotency.ErrInProgress) {
			t.Fatalf("retry while the holder is alive: %v, want ErrInProgress", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

const pausedOwnerEnv = "JOBFENCE_IDEMPOTENCY_PAUSED_OWNER"

// pausedOwnerMain is the child process of TestPauseTwoProcesses. It claims
// the key "job-9" (Lease 1s, heartbeat every 200ms), prints "claimed
// <fence>", then blocks reading stdin; the parent stops it with SIGSTOP
// there. Once it reads a line it writes its ledger row under its fence and
// returns. It prints "ledger: <outcome>" and "do: <outcome>" and exits 0
// when both were refused with ErrStaleFence, 1 otherwise.
func pausedOwnerMain() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println("error:", err)
		return 2
	}
	defer pool.Close()
	s := idempotency.New(pool, idempotency.Options{Scope: "pause", Lease: time.Second, Heartbeat: 200 * time.Millisecond})
	var ledgerErr error
	_, doErr := s.Do(ctx, "job-9", "fp", func(ctx context.Context) ([]byte, error) {
		fence, _ := idempotency.FenceFrom(ctx)
		fmt.Println("claimed", fence)
		if _, err := bufio.NewReader(os.Stdin).ReadString('\n'); err != nil {
			return nil, err
		}
		// Woken from the pause. Like any zombie it does not look at ctx.
		ledgerErr = idempotency.Fenced(pool.Exec(context.Background(), writeLedgerSQL, "child", fence))
		return []byte("child"), nil
	})
	describe := func(err error) string {
		switch {
		case errors.Is(err, idempotency.ErrStaleFence):
			return "stale"
		case err == nil:
			return "applied"
		}
		return "error " + err.Error()
	}
	fmt.Println("ledger:", describe(ledgerErr))
	fmt.Println("do:", describe(doErr))
	if errors.Is(ledgerErr, idempotency.ErrStaleFence) && errors.Is(doErr, idempotency.ErrStaleFence) {
		return 0
	}
	return 1
}

// TestPauseTwoProcesses runs the owner in a child process (this test binary
// re-executed), stops it with SIGSTOP while it holds the key, lets its lease
// run out so this process takes the key over and writes, then resumes it
// with SIGCONT: the child's late writes must fail with ErrStaleFence.
func TestPauseTwoProcesses(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	if _, err := db.Pool.Exec(ctx, ledgerSQL); err != nil {
		t.Fatal(err)
	}
	c := testchild.Start(t, pausedOwnerEnv, "DATABASE_URL="+db.URL)
	first := c.Next(t)
	childFence, err := strconv.ParseInt(strings.TrimPrefix(first, "claimed "), 10, 64)
	if err != nil {
		t.Fatalf("child said %q (stderr %s)", first, c.Stderr())
	}
	c.Signal(t, syscall.SIGSTOP)

	rec := newLogRecorder()
	s := idempotency.New(db.Pool, idempotency.Options{
		Scope: "pause", WaitForInProgress: true, PollInterval: 20 * time.Millisecond, Logger: rec.Logger(),
	})
	var fence int64
	got, err := s.Do(ctx, "job-9", "fp", func(ctx context.Context) ([]byte, error) {
		fence, _ = idempotency.FenceFrom(ctx)
		if err := idempotency.Fenced(db.Pool.Exec(ctx, writeLedgerSQL, "parent", fence)); err != nil {
			return nil, err
		}
		return []byte("parent"), nil
	})
	if err != nil || string(got) != "parent" || fence <= childFence {
		t.Fatalf("takeover: %q, %v, fence %d after the child's %d", got, err, fence, childFence)
	}
	if rec.count(msgTookOver) != 1 {
		t.Fatal("the parent did not take the key over")
	}

	c.Signal(t, syscall.SIGCONT)
	if _, err := c.Stdin.Write([]byte("wake\n")); err != nil {
		t.Fatal(err)
	}
	c.Stdin.Close()
	report := []string{c.Next(t), c.Next(t)}
	waitErr := c.Wait()
	if want := []string{"ledger: stale", "do: stale"}; strings.Join(report, "|") != strings.Join(want, "|") || waitErr != nil {
		t.Fatalf("child reported %q and exited with %v, want %q and 0 (stderr %s)", report, waitErr, want, c.Stderr())
	}

	if owner, f := readLedger(t, ctx, db.Pool); owner != "parent" || f != fence {
		t.Fatalf("ledger %s/%d, want parent/%d", owner, f, fence)
	}
	r, err := s.Lookup(ctx, "job-9")
	if err != nil || string(r.Response) != "parent" || r.Fence != fence {
		t.Fatalf("key %+v, %v", r, err)
	}
}

// TestDoLostLeaseCancelsFn: when a heartbeat finds that the key was taken
// over, fn's ctx is cancelled with ErrStaleFence as its cause, and Do
// reports the stale fence. (The heartbeat here is slower than the lease, so
// B can take over while A is running.)
func TestDoLostLeaseCancelsFn(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	a := idempotency.New(db.Pool, idempotency.Options{Lease: 300 * time.Millisecond, Heartbeat: 2 * time.Second})
	b := idempotency.New(db.Pool, idempotency.Options{WaitForInProgress: true, PollInterval: 20 * time.Millisecond})
	held := make(chan struct{})
	type outcome struct{ cause, err error }
	done := make(chan outcome, 1)
	go func() {
		var o outcome
		_, o.err = a.Do(ctx, "k", "fp", func(ctx context.Context) ([]byte, error) {
			close(held)
			<-ctx.Done()
			o.cause = context.Cause(ctx)
			return nil, ctx.Err()
		})
		done <- o
	}()
	<-held
	if got, err := b.Do(ctx, "k", "fp", func(context.Context) ([]byte, error) { return []byte("B"), nil }); err != nil || string(got) != "B" {
		t.Fatalf("B: %q, %v", got, err)
	}
	o := <-done
	if !errors.Is(o.cause, idempotency.ErrStaleFence) {
		t.Fatalf("A's ctx cause %v, want ErrStaleFence", o.cause)
	}
	if !errors.Is(o.err, idempotency.ErrStaleFence) || !errors.Is(o.err, context.Canceled) {
		t.Fatalf("A's Do: %v, want ErrStaleFence joined with fn's context.Canceled", o.err)
	}
	if r, err := b.Lookup(ctx, "k"); err != nil || string(r.Response) != "B" {
		t.Fatalf("key %+v, %v", r, err)
	}
}
