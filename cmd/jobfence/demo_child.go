package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// demoChildEnv marks a process started by the demo as one of its worker
// processes (the test binary looks for it to run the child instead of the
// tests).
const demoChildEnv = "JOBFENCE_DEMO_CHILD"

// shipArgs is the job of scenarios 4 and 5: ship an order.
type shipArgs struct {
	Order int `json:"order"`
}

func (shipArgs) Kind() string { return "demo-ship" }

const (
	createShipmentsSQL = `CREATE TABLE IF NOT EXISTS demo_shipments (job_id bigint NOT NULL, fence bigint NOT NULL, worker text NOT NULL)`
	insertShipmentSQL  = `INSERT INTO demo_shipments (job_id, fence, worker) VALUES ($1, $2, $3)`
	shipmentsSQL       = `SELECT count(*), coalesce(max(fence), 0), coalesce(max(worker), '') FROM demo_shipments WHERE job_id = $1`
)

// runDemoChild is the worker process of scenarios 4 and 5 ("paused" or
// "killed"): a worker with a 1s lease on the queue of that name, at
// DATABASE_URL. Its handler prints "started <job id> <fence>", then blocks
// reading a line from stdin, meanwhile the demo pauses or kills the
// process. Given a line, it records the shipment in the job's transaction,
// without looking at its context, as a careless handler would. Then it
// waits for the worker's verdict on its job and prints "outcome completed=N
// stale=N lost=N".
func runDemoChild(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprintln(stderr, "usage: demo-child paused|killed (it is run by jobfence demo, with DATABASE_URL set)")
		return flag.ErrHelp
	}
	if len(args) != 1 || (args[0] != "paused" && args[0] != "killed") {
		return fmt.Errorf("usage: demo-child paused|killed (it is run by jobfence demo, with DATABASE_URL set)")
	}
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return errors.New("DATABASE_URL is not set")
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The worker's logs would only say what the demo reports: that its
	// heartbeats and completion were refused after the pause.
	log := slog.New(slog.DiscardHandler)
	id := fmt.Sprintf("child-%d", os.Getpid())
	stdin := bufio.NewReader(os.Stdin)
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[shipArgs]) error {
		fmt.Fprintf(stdout, "started %d %d\n", job.ID, job.Fence)
		if _, err := stdin.ReadString('\n'); err != nil {
			return fmt.Errorf("wait for the demo: %w", err)
		}
		_, err := tx.Exec(context.Background(), insertShipmentSQL, job.ID, job.Fence, id)
		return err
	})
	w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: log}), reg, worker.Config{
		ID: id, Queues: map[string]int{args[0]: 1}, Lease: time.Second,
		PollInterval: 100 * time.Millisecond, DisableMaintenance: true, Logger: log,
	})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	err = waitUntil(ctx, 2*time.Minute, "the job's outcome", func() (bool, error) {
		s := w.Stats()
		return s.Completed+s.Stale+s.Lost+s.Retried > 0, nil
	})
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if serr := w.Stop(stopCtx); err == nil {
		err = serr
	}
	s := w.Stats()
	fmt.Fprintf(stdout, "outcome completed=%d stale=%d lost=%d\n", s.Completed, s.Stale, s.Lost)
	return err
}

// childOutcome is what a worker process reported about its job.
type childOutcome struct {
	completed, stale, lost int64
}

// child is a worker process of the demo.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
}

// startChild runs this executable's demo-child command in mode.
func startChild(ctx context.Context, d *demo, mode string) (*child, error) {
	cmd := exec.CommandContext(ctx, d.self, "demo-child", mode)
	cmd.Env = append(os.Environ(), demoChildEnv+"=1", "DATABASE_URL="+d.url)
	cmd.Stderr = d.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start worker process: %w", err)
	}
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 8)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// id is the child's worker ID.
func (c *child) id() string { return fmt.Sprintf("child-%d", c.pid()) }

// next returns the child's next line of output.
func (c *child) next(ctx context.Context, timeout time.Duration) (string, error) {
	select {
	case l, ok := <-c.lines:
		if !ok {
			return "", fmt.Errorf("worker process %d exited early", c.pid())
		}
		return l, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("worker process %d said nothing for %s", c.pid(), timeout)
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
}

// started waits for the child to claim its job.
func (c *child) started(ctx context.Context) (jobID, fence int64, err error) {
	l, err := c.next(ctx, time.Minute)
	if err != nil {
		return 0, 0, err
	}
	if _, err := fmt.Sscanf(l, "started %d %d", &jobID, &fence); err != nil {
		return 0, 0, fmt.Errorf("worker process %d said %q, want \"started <job> <fence>\"", c.pid(), l)
	}
	return jobID, fence, nil
}

// outcome waits for the child's report on its job.
func (c *child) outcome(ctx context.Context) (childOutcome, error) {
	var o childOutcome
	l, err := c.next(ctx, 2*time.Minute)
	if err != nil {
		return o, err
	}
	if _, err := fmt.Sscanf(l, "outcome completed=%d stale=%d lost=%d", &o.completed, &o.stale, &o.lost); err != nil {
		return o, fmt.Errorf("worker process %d said %q, want its outcome", c.pid(), l)
	}
	return o, nil
}

// wait waits for the child to exit, after its output ended.
func (c *child) wait() error {
	for range c.lines {
	}
	return c.cmd.Wait()
}

// kill ends a child that is still running, paused or not.
func (c *child) kill() {
	if c.cmd.ProcessState != nil {
		return
	}
	_ = c.cmd.Process.Signal(syscall.SIGCONT)
	_ = c.cmd.Process.Kill()
	_ = c.wait()
}
