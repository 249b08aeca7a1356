// Command killed-worker shows a worker killed mid-job whose job is rescued
// and finished by another instance.
//
// The program runs a worker in a child process (itself, re-executed) whose
// handler ships an order. Once the child has claimed the job and is in the
// middle of it, the program kills it with SIGKILL: no deferred cleanup, no
// goodbye. The job stays claimed until its 1s lease runs out; a worker in
// this process rescues it (any instance may, none leads) and runs it again
// under a new fence. The program prints the job's attempts and the
// shipments of the order, and exits non-zero unless the order shipped
// exactly once.
//
//	go run ./examples/killed-worker
//
// It uses the PostgreSQL that DATABASE_URL names, or starts a throwaway one.
package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/jobfencetest/devserver"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// ShipOrder is the job: ship order Order.
type ShipOrder struct {
	Order int64 `json:"order"`
}

// Kind names the job's handler.
func (ShipOrder) Kind() string { return "ship-order" }

const (
	createShipments = `CREATE TABLE IF NOT EXISTS example_shipments (order_id bigint NOT NULL, fence bigint NOT NULL, worker text NOT NULL)`
	insertShipment  = `INSERT INTO example_shipments (order_id, fence, worker) VALUES ($1, $2, $3)`
	countShipments  = `SELECT count(*) FROM example_shipments WHERE order_id = $1`
)

// childQueue names, in the child's environment, the queue it works.
const childQueue = "KILLED_WORKER_QUEUE"

var quiet = slog.New(slog.DiscardHandler)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run := parent
	if os.Getenv(childQueue) != "" {
		run = child
	}
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "killed-worker:", err)
		os.Exit(1)
	}
}

// newWorker starts a worker on queue q whose handler ships the order in the
// job's transaction, after calling before.
func newWorker(ctx context.Context, pool *pgxpool.Pool, q string, before func(*worker.Job[ShipOrder])) (*worker.Worker, error) {
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[ShipOrder]) error {
		before(job)
		_, err := tx.Exec(ctx, insertShipment, job.Args.Order, job.Fence, fmt.Sprint("pid ", os.Getpid()))
		return err
	})
	w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: quiet}), reg, worker.Config{
		Queues: map[string]int{q: 1}, Lease: time.Second,
		RescueInterval: 200 * time.Millisecond, PollInterval: 100 * time.Millisecond, Logger: quiet,
	})
	if err != nil {
		return nil, err
	}
	return w, w.Start(ctx)
}

// child is the worker that gets killed: it claims the job, says so, and
// takes its time.
func child(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	w, err := newWorker(ctx, pool, os.Getenv(childQueue), func(job *worker.Job[ShipOrder]) {
		fmt.Printf("claimed job %d under fence %d\n", job.ID, job.Fence)
		// A long step; the parent kills us here. (Were the parent to die
		// first, stdin would close and end the wait.)
		bufio.NewReader(os.Stdin).ReadString('\n')
	})
	if err != nil {
		return err
	}
	<-ctx.Done()
	return w.Stop(context.Background())
}

func parent(ctx context.Context) error {
	env, err := devserver.Start(ctx, devserver.Options{Postgres: true})
	if err != nil {
		return err
	}
	defer env.Close()
	if err := migrations.Up(ctx, env.DatabaseURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, env.DatabaseURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, createShipments); err != nil {
		return err
	}
	// A queue and an order of this run's own, on a shared database.
	order := time.Now().UnixNano()
	q := fmt.Sprintf("killed-worker-%d", order)
	client := pgqueue.New(pool, pgqueue.Config{Logger: quiet})
	job, err := client.Insert(ctx, ShipOrder{Order: order}, &queue.InsertOpts{Queue: q})
	if err != nil {
		return err
	}

	self, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, self)
	cmd.Env = append(os.Environ(), childQueue+"="+q, "DATABASE_URL="+env.DatabaseURL)
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	defer stdin.Close()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		return errors.New("the worker process exited before claiming the job")
	}
	fmt.Printf("worker process %d: %s\n", cmd.Process.Pid, lines.Text())
	cmd.Process.Kill()
	fmt.Println("SIGKILL:", cmd.Wait())

	// Another instance of the service: it rescues the job once the lease
	// runs out and runs it again.
	rescuer, err := newWorker(ctx, pool, q, func(*worker.Job[ShipOrder]) {})
	if err != nil {
		return err
	}
	defer rescuer.Stop(context.Background())
	var j *queue.Job
	for deadline := time.Now().Add(time.Minute); ; {
		if j, err = client.Get(ctx, job.ID); err != nil {
			return err
		}
		if j.State == queue.StateCompleted {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("job %d not rescued and completed in a minute: %s", j.ID, j.State)
		}
		time.Sleep(50 * time.Millisecond)
	}
	fmt.Printf("the rescuer (pid %d) finished the job under fence %d; attempts %d by %v\n", os.Getpid(), j.Fence, j.Attempt, j.AttemptedBy)
	for _, e := range j.Errors {
		fmt.Printf("  attempt %d: %s\n", e.Attempt, e.Error)
	}

	var shipments int
	if err := pool.QueryRow(ctx, countShipments, order).Scan(&shipments); err != nil {
		return err
	}
	fmt.Printf("shipments of order %d: %d\n", order, shipments)
	if shipments != 1 {
		return fmt.Errorf("want exactly 1 shipment")
	}
	return nil
}
