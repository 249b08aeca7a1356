package worker_test

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/freeze"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testchild"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// frozenChildEnv makes the test binary play the frozen worker.
const frozenChildEnv = "JOBFENCE_FROZEN_TX_CHILD"

// addEffectTx registers a transactional handler that writes the job's
// effect in its transaction.
func addEffectTx(reg *worker.Registry) {
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[effectArgs]) error {
		_, err := tx.Exec(ctx, "INSERT INTO effects (job_id, n, fence) VALUES ($1, $2, $3)", job.ID, job.Args.N, job.Fence)
		return err
	})
}

// TestFrozenTxHolderLosesTheJob: a worker frozen between a transactional
// job's fenced completion and its COMMIT holds the job's row. PostgreSQL
// ends that transaction when the lease runs out, so another worker rescues
// and completes the job within about lease + rescue interval; the frozen
// worker's commit fails when it wakes, and the effect happened once.
func TestFrozenTxHolderLosesTheJob(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	makeEffects(t, db.Pool)
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	res, err := c.Insert(ctx, effectArgs{N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	const lease = 2 * time.Second
	child := testchild.Start(t, frozenChildEnv, "DATABASE_URL="+db.URL)
	var childFence int64
	if _, err := fmt.Sscanf(child.Next(t), "FENCED %d", &childFence); err != nil {
		t.Fatalf("child: %v (stderr %s)", err, child.Stderr())
	}
	froze := time.Now()

	reg := worker.NewRegistry()
	addEffectTx(reg)
	rescueEvery := lease / 2
	startWorker(t, pgqueue.New(db.NewPool(t, 8), pgqueue.Config{Logger: quietLogger()}), reg, worker.Config{
		Lease: lease, PollInterval: 100 * time.Millisecond, RetryPolicy: worker.ExponentialRetry{Max: time.Millisecond},
	})
	testwatch.WaitFor(t, 30*time.Second, "the frozen worker's job completed by another", func() bool {
		j := stateOf(t, c, res.ID)
		return j.State == queue.StateCompleted && j.Fence != childFence
	})
	// The rescuer's first pass comes up to 1.5 intervals in (jittered).
	if took, bound := time.Since(froze), lease+3*rescueEvery/2+2*time.Second; took > bound {
		t.Fatalf("job completed %s after its holder froze, want within lease + rescue interval (%s)", took, bound)
	}
	child.Signal(t, syscall.SIGCONT)
	if stats, err := child.Next(t), child.Wait(); stats != "STATS completed=0 stale=1" || err != nil {
		t.Fatalf("the frozen worker reports %q and exits with %v, want its commit failed and its outcome stale", stats, err)
	}
	rows, distinct := countEffects(t, db.Pool)
	var fence int64
	if err := db.Pool.QueryRow(ctx, "SELECT fence FROM effects").Scan(&fence); err != nil || rows != 1 || distinct != 1 || fence == childFence {
		t.Fatalf("effects: %d rows (fence %d, frozen holder's %d, %v), want one, by the rescuer", rows, fence, childFence, err)
	}
}

// frozenTxChild is the frozen worker of TestFrozenTxHolderLosesTheJob,
// run in a child process (see TestMain): it stops itself right after a
// job's fenced completion, and when continued reports what became of the
// job.
func frozenTxChild() int {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer pool.Close()
	reg := worker.NewRegistry()
	addEffectTx(reg)
	w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: quietLogger()}), reg, worker.Config{
		Lease: 2 * time.Second, DisableMaintenance: true, PollInterval: 100 * time.Millisecond, Logger: quietLogger(),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	worker.SetAfterCompleteTx(w, func(job *queue.Job) {
		fmt.Printf("FENCED %d\n", job.Fence)
		freeze.Self()
	})
	if err := w.Start(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	deadline := time.Now().Add(time.Minute)
	for w.Stats().Completed+w.Stats().Stale == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	w.Stop(stopCtx)
	fmt.Printf("STATS completed=%d stale=%d\n", w.Stats().Completed, w.Stats().Stale)
	return 0
}
