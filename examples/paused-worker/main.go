// Command paused-worker shows a worker paused past its lease being fenced
// out, and the job's effect applied once.
//
// The program runs a worker in a child process (itself, re-executed). The
// worker's handler ships an order: it records the shipment in the job's
// transaction (worker.AddTx), which commits only together with the job's
// completion under the claim's fence. Once the child has claimed the job,
// the program freezes it with SIGSTOP. The 1s lease runs out, and a worker
// in this process rescues the job and ships the order under a new fence.
// Then the child is resumed with SIGCONT: it wakes up in the middle of its
// handler and writes the shipment without a second look, as a careless
// handler would; its completion is refused as stale and its transaction
// rolls back. The program prints the shipments of the order and exits
// non-zero unless there is exactly one.
//
//	go run ./examples/paused-worker
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
	countShipments  = `SELECT count(*), coalesce(string_agg(worker, ', '), '') FROM example_shipments WHERE order_id = $1`
)

// childQueue names, in the child's environment, the queue it works.
const childQueue = "PAUSED_WORKER_QUEUE"

var quiet = slog.New(slog.DiscardHandler)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	run := parent
	if os.Getenv(childQueue) != "" {
		run = child
	}
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "paused-worker:", err)
		os.Exit(1)
	}
}

// ship is the handler's work: record the shipment in the job's transaction.
func ship(tx pgx.Tx, job *worker.Job[ShipOrder], by string) error {
	_, err := tx.Exec(context.Background(), insertShipment, job.Args.Order, job.Fence, by)
	return err
}

// child is the worker that gets paused. It claims the job, says so, and
// blocks until the parent writes a line: the parent pauses it there.
func child(ctx context.Context) error {
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return err
	}
	defer pool.Close()
	stdin := bufio.NewReader(os.Stdin)
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[ShipOrder]) error {
		fmt.Printf("claimed job %d under fence %d\n", job.ID, job.Fence)
		if _, err := stdin.ReadString('\n'); err != nil { // a long step
			return err
		}
		return ship(tx, job, "the paused worker")
	})
	w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: quiet}), reg, worker.Config{
		Queues: map[string]int{os.Getenv(childQueue): 1}, Lease: time.Second, Logger: quiet,
	})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	for s := w.Stats(); s.Completed+s.Stale+s.Lost == 0 && ctx.Err() == nil; s = w.Stats() {
		time.Sleep(50 * time.Millisecond)
	}
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = w.Stop(stopCtx)
	s := w.Stats()
	fmt.Printf("completed %d, refused as stale %d, lost %d\n", s.Completed, s.Stale, s.Lost)
	return err
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
	q := fmt.Sprintf("paused-worker-%d", order)
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
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() { cmd.Process.Signal(syscall.SIGCONT); cmd.Process.Kill(); cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() {
		return errors.New("the worker process exited before claiming the job")
	}
	fmt.Printf("worker process %d: %s\n", cmd.Process.Pid, lines.Text())
	cmd.Process.Signal(syscall.SIGSTOP)
	fmt.Println("SIGSTOP: the worker process is frozen past its 1s lease")

	// Another instance of the service: it rescues expired leases and runs
	// the job again under a new fence.
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[ShipOrder]) error {
		return ship(tx, job, "the rescuer")
	})
	rescuer, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: quiet}), reg, worker.Config{
		Queues: map[string]int{q: 1}, RescueInterval: 200 * time.Millisecond, PollInterval: 100 * time.Millisecond, Logger: quiet,
	})
	if err != nil {
		return err
	}
	if err := rescuer.Start(ctx); err != nil {
		return err
	}
	defer rescuer.Stop(context.Background())
	for deadline := time.Now().Add(time.Minute); ; {
		j, err := client.Get(ctx, job.ID)
		if err != nil {
			return err
		}
		if j.State == queue.StateCompleted {
			fmt.Printf("the rescuer shipped the order under fence %d (attempt %d)\n", j.Fence, j.Attempt)
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("job %d not rescued and completed in a minute: %s", j.ID, j.State)
		}
		time.Sleep(50 * time.Millisecond)
	}

	fmt.Fprintln(stdin, "wake up") // read as soon as the process runs again
	cmd.Process.Signal(syscall.SIGCONT)
	fmt.Println("SIGCONT: the worker process wakes up and writes its shipment")
	if !lines.Scan() {
		return errors.New("the worker process exited without its report")
	}
	fmt.Println("worker process:", lines.Text())

	var shipments int
	var by string
	if err := pool.QueryRow(ctx, countShipments, order).Scan(&shipments, &by); err != nil {
		return err
	}
	fmt.Printf("shipments of order %d: %d (by %s)\n", order, shipments, by)
	if shipments != 1 {
		return fmt.Errorf("want exactly 1 shipment")
	}
	return nil
}
