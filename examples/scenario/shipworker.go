package scenario

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// ShipArgs is the job of the paused-worker and killed-worker scenarios:
// ship an order.
type ShipArgs struct {
	Order int `json:"order"`
}

// Kind implements queue.Args.
func (ShipArgs) Kind() string { return "ship" }

const (
	createShipmentsSQL = `CREATE TABLE IF NOT EXISTS shipments (job_id bigint NOT NULL, fence bigint NOT NULL, worker text NOT NULL)`
	insertShipmentSQL  = `INSERT INTO shipments (job_id, fence, worker) VALUES ($1, $2, $3)`
	shipmentsSQL       = `SELECT count(*), coalesce(max(fence), 0), coalesce(max(worker), '') FROM shipments WHERE job_id = $1`
)

// Shipments reports how many shipments job id made, and the fence and
// worker of the last.
func Shipments(ctx context.Context, pool *pgxpool.Pool, id int64) (n, fence int64, worker string, err error) {
	err = pool.QueryRow(ctx, shipmentsSQL, id).Scan(&n, &fence, &worker)
	return n, fence, worker, err
}

// RunShipWorker is the worker process of the paused-worker and
// killed-worker scenarios: a worker with a 1s lease on queue q, at
// DATABASE_URL. Its handler prints "started <job id> <fence>", then blocks
// reading a line from stdin, meanwhile the scenario pauses or kills the
// process. Given a line, it records the shipment in the job's transaction,
// without looking at its context, as a careless handler would. Then it
// waits for the worker's verdict on its job and prints "outcome
// completed=N stale=N lost=N".
func RunShipWorker(ctx context.Context, q string, stdout io.Writer) error {
	url := os.Getenv("DATABASE_URL")
	if url == "" {
		return fmt.Errorf("worker process of queue %q: DATABASE_URL is not set", q)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer pool.Close()
	// The worker's logs would only say what the scenario reports: that its
	// heartbeats and completion were refused after the pause.
	log := slog.New(slog.DiscardHandler)
	id := shipWorkerID(os.Getpid())
	stdin := bufio.NewReader(os.Stdin)
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[ShipArgs]) error {
		fmt.Fprintf(stdout, "started %d %d\n", job.ID, job.Fence)
		if _, err := stdin.ReadString('\n'); err != nil {
			return fmt.Errorf("wait for the scenario: %w", err)
		}
		_, err := tx.Exec(context.Background(), insertShipmentSQL, job.ID, job.Fence, id)
		return err
	})
	w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: log}), reg, worker.Config{
		ID: id, Queues: map[string]int{q: 1}, Lease: time.Second,
		PollInterval: 100 * time.Millisecond, DisableMaintenance: true, Logger: log,
	})
	if err != nil {
		return err
	}
	if err := w.Start(ctx); err != nil {
		return err
	}
	err = WaitUntil(ctx, 2*time.Minute, "the job's outcome", func() (bool, error) {
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

// ChildOutcome is what a worker process reported about its job.
type ChildOutcome struct {
	Completed, Stale, Lost int64
}

// Child is a running worker process (RunShipWorker).
type Child struct {
	// Cmd is the process, for signals.
	Cmd *exec.Cmd
	// Stdin reaches the handler, which waits for a line.
	Stdin io.WriteCloser
	lines chan string
}

// Pid is the process's ID.
func (c *Child) Pid() int { return c.Cmd.Process.Pid }

// ID is the process's worker ID.
func (c *Child) ID() string { return shipWorkerID(c.Pid()) }

// shipWorkerID is the worker ID of the RunShipWorker process pid.
func shipWorkerID(pid int) string { return fmt.Sprintf("child-%d", pid) }

// StartChild starts a worker process of queue q (env.WorkerProcess), for
// scenarios whose worker process runs handlers of their own: it must
// print "started <job id> <fence>" once it has claimed the job, wait for
// a line on its stdin, and end with the line RunShipWorker ends with
// ("outcome completed=N stale=N lost=N").
func StartChild(ctx context.Context, env *Env, q string) (*Child, error) {
	return startChild(ctx, env, q)
}

// Started waits for the process's "started <job id> <fence>" line.
func (c *Child) Started(ctx context.Context) (jobID, fence int64, err error) { return c.started(ctx) }

func startChild(ctx context.Context, env *Env, q string) (*Child, error) {
	cmd := env.WorkerProcess(ctx, q)
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
	c := &Child{Cmd: cmd, Stdin: stdin, lines: make(chan string, 8)}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
	}()
	return c, nil
}

func (c *Child) next(ctx context.Context, timeout time.Duration) (string, error) {
	select {
	case l, ok := <-c.lines:
		if !ok {
			return "", fmt.Errorf("worker process %d exited early", c.Pid())
		}
		return l, nil
	case <-time.After(timeout):
		return "", fmt.Errorf("worker process %d said nothing for %s", c.Pid(), timeout)
	case <-ctx.Done():
		return "", context.Cause(ctx)
	}
}

func (c *Child) started(ctx context.Context) (jobID, fence int64, err error) {
	l, err := c.next(ctx, time.Minute)
	if err != nil {
		return 0, 0, err
	}
	if _, err := fmt.Sscanf(l, "started %d %d", &jobID, &fence); err != nil {
		return 0, 0, fmt.Errorf("worker process %d said %q, want \"started <job> <fence>\"", c.Pid(), l)
	}
	return jobID, fence, nil
}

// Outcome waits for the process's report on its job.
func (c *Child) Outcome(ctx context.Context) (ChildOutcome, error) {
	var o ChildOutcome
	l, err := c.next(ctx, 2*time.Minute)
	if err != nil {
		return o, err
	}
	if _, err := fmt.Sscanf(l, "outcome completed=%d stale=%d lost=%d", &o.Completed, &o.Stale, &o.Lost); err != nil {
		return o, fmt.Errorf("worker process %d said %q, want its outcome", c.Pid(), l)
	}
	return o, nil
}

// Wait waits for the process to exit, after its output ended.
func (c *Child) Wait() error {
	for range c.lines {
	}
	return c.Cmd.Wait()
}

// Kill ends a process that is still running, paused or not.
func (c *Child) Kill() {
	if c.Cmd.ProcessState != nil {
		return
	}
	_ = c.Cmd.Process.Signal(syscall.SIGCONT)
	_ = c.Cmd.Process.Kill()
	_ = c.Wait()
}

// Shipping is one shipment job claimed by a worker process.
type Shipping struct {
	Client *pgqueue.Client
	// JobID is the job; Fence is the worker process's claim.
	JobID, Fence int64
	Child        *Child
}

// ShipInChild enqueues one shipment job on queue q and starts a worker
// process of q that claims it; it returns once the process has claimed the
// job.
func ShipInChild(ctx context.Context, env *Env, q string, order int) (*Shipping, error) {
	if _, err := env.Pool.Exec(ctx, createShipmentsSQL); err != nil {
		return nil, err
	}
	c := pgqueue.New(env.Pool, pgqueue.Config{Logger: env.Log()})
	res, err := c.Insert(ctx, ShipArgs{Order: order}, &queue.InsertOpts{Queue: q})
	if err != nil {
		return nil, err
	}
	ch, err := startChild(ctx, env, q)
	if err != nil {
		return nil, err
	}
	jobID, fence, err := ch.started(ctx)
	if err == nil && jobID != res.ID {
		err = fmt.Errorf("worker process claimed job %d, want %d", jobID, res.ID)
	}
	if err != nil {
		ch.Kill()
		return nil, err
	}
	return &Shipping{Client: c, JobID: res.ID, Fence: fence, Child: ch}, nil
}

// Rescuers starts the fleet's other instances: n workers on q, each with
// its own pool, rescuing expired leases often. Their handler records the
// shipment in the job's transaction. stop stops them; calling it again
// does nothing.
func Rescuers(ctx context.Context, env *Env, q string, n int) (ws []*worker.Worker, stop func(), err error) {
	var pools []*pgxpool.Pool
	stop = func() {
		for _, w := range ws {
			stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			w.Stop(stopCtx)
			cancel()
		}
		for _, p := range pools {
			p.Close()
		}
	}
	for i := range n {
		pool, err := env.NewPool(ctx, 4)
		if err != nil {
			stop()
			return nil, nil, err
		}
		pools = append(pools, pool)
		id := fmt.Sprintf("%s-rescuer-%d", q, i+1)
		reg := worker.NewRegistry()
		worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[ShipArgs]) error {
			_, err := tx.Exec(ctx, insertShipmentSQL, job.ID, job.Fence, id)
			return err
		})
		w, err := worker.New(pgqueue.New(pool, pgqueue.Config{Logger: env.Log()}), reg, worker.Config{
			ID: id, Queues: map[string]int{q: 4}, Lease: 5 * time.Second,
			RescueInterval: 200 * time.Millisecond, PollInterval: 100 * time.Millisecond, Logger: env.Log(),
		})
		if err == nil {
			err = w.Start(ctx)
		}
		if err != nil {
			stop()
			return nil, nil, err
		}
		ws = append(ws, w)
	}
	return ws, sync.OnceFunc(stop), nil
}

// WaitCompleted waits until job id is completed and returns it.
func WaitCompleted(ctx context.Context, c *pgqueue.Client, id int64) (*queue.Job, error) {
	var j *queue.Job
	err := WaitUntil(ctx, 2*time.Minute, fmt.Sprintf("job %d to complete", id), func() (bool, error) {
		var err error
		j, err = c.Get(ctx, id)
		return err == nil && j.State == queue.StateCompleted, err
	})
	return j, err
}

// Rescue is a shipment job whose worker process the scenario disrupted
// (paused or killed) and which the fleet's other instances then rescued
// and completed.
type Rescue struct {
	*Shipping
	// Job is the job as completed by a rescuer.
	Job       *queue.Job
	rescuers  []*worker.Worker
	stopFleet func()
}

// ShipDisruptRescue enqueues a shipment of order on queue q, has a worker
// process claim it, calls disrupt on the process (named by signal in the
// progress line), starts two rescuing instances and waits until one of
// them completed the job. The rescuers keep running until Stop.
func ShipDisruptRescue(ctx context.Context, env *Env, q string, order int, signal string, disrupt func(*Child) error) (*Rescue, error) {
	s, err := ShipInChild(ctx, env, q, order)
	if err != nil {
		return nil, err
	}
	if err := disrupt(s.Child); err != nil {
		s.Child.Kill()
		return nil, err
	}
	env.Logf("worker process %d claimed job %d (fence %d); %s", s.Child.Pid(), s.JobID, s.Fence, signal)
	ws, stop, err := Rescuers(ctx, env, q, 2)
	if err != nil {
		s.Child.Kill()
		return nil, err
	}
	r := &Rescue{Shipping: s, rescuers: ws, stopFleet: stop}
	if r.Job, err = WaitCompleted(ctx, s.Client, s.JobID); err != nil {
		r.Stop()
		return nil, err
	}
	env.Logf("its 1s lease ran out; %s rescued the job and shipped the order under fence %d", r.Job.AttemptedBy[len(r.Job.AttemptedBy)-1], r.Job.Fence)
	return r, nil
}

// Rescued reports whether a rescuer's maintenance rescued a job.
func (r *Rescue) Rescued() bool {
	return slices.ContainsFunc(r.rescuers, func(w *worker.Worker) bool { return w.Stats().Rescued > 0 })
}

// Stop stops the rescuers and kills the worker process if it still runs;
// calling it again does nothing.
func (r *Rescue) Stop() {
	r.stopFleet()
	r.Child.Kill()
}
