package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// TestListenOneConnection: a worker holds one LISTEN connection for its
// wake-ups, cancellations and pauses, whatever its number of queues; it
// opens it when it starts and closes it when it stops.
func TestListenOneConnection(t *testing.T) {
	for _, n := range []int{1, 3} {
		t.Run(fmt.Sprint(n, "queues"), func(t *testing.T) {
			db := pgtest.New(t)
			ctx := context.Background()
			app := "listen-" + db.Schema
			pool := pgtest.AppPool(t, db, app, 8)
			c := pgqueue.New(pool, pgqueue.Config{Logger: quietLogger()})
			if pids := pgtest.Listeners(t, db, app); len(pids) != 0 {
				t.Fatalf("LISTEN connections before the worker started: %v", pids)
			}
			queues := map[string]int{}
			for i := range n {
				queues[fmt.Sprint("q", i)] = 2
			}
			started, release := make(chan string, 1), make(chan struct{})
			w := startWorker(t, c, gatedHandlers(started, release), worker.Config{Queues: queues})
			defer close(release)
			// Start returns with every LISTEN in place; watch a while for
			// any connection opened later.
			var pids []int
			for range 5 {
				if pids = pgtest.Listeners(t, db, app); len(pids) != 1 {
					t.Fatalf("worker on %d queues holds LISTEN connections %v, want exactly 1", n, pids)
				}
				time.Sleep(100 * time.Millisecond)
			}
			var all int
			if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1`, app).Scan(&all); err != nil {
				t.Fatal(err)
			}
			t.Logf("worker on %d queues: 1 LISTEN connection (pid %d); server connections of its client: %d, of which the pool holds %d",
				n, pids[0], all, pool.Stat().TotalConns())
			stop, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			if err := w.Stop(stop); err != nil {
				t.Fatal(err)
			}
			testwatch.WaitFor(t, 10*time.Second, "the LISTEN connection to close when the worker stopped", func() bool {
				return len(pgtest.Listeners(t, db, app)) == 0
			})
		})
	}
}

type listenArgs struct {
	Name string `json:"name"`
}

func (listenArgs) Kind() string { return "listen" }

// TestListenReconnect: when the worker's one LISTEN connection is
// terminated, it comes back, and wake-ups of every queue, cancellations
// and pauses arrive by notification again. Polling is slowed far beyond
// the test's bounds (PollInterval 1h, PausePollInterval 1m, Lease 1h so
// no heartbeat finds a cancelled claim), so only a notification can meet
// them. Both through the pool and through ListenURL.
func TestListenReconnect(t *testing.T) {
	for _, direct := range []bool{false, true} {
		name := "pool"
		if direct {
			name = "ListenURL"
		}
		t.Run(name, func(t *testing.T) {
			db := pgtest.New(t)
			ctx := context.Background()
			app := "relisten-" + db.Schema
			clientLogs, workerLogs := &logbuf.Buffer{}, &logbuf.Buffer{}
			cfg := pgqueue.Config{Logger: slog.New(slog.NewTextHandler(clientLogs, nil)), PausePollInterval: time.Minute}
			poolApp := app
			if direct {
				// The pool's connections are not the LISTEN connection's.
				poolApp = app + "-pool"
				cfg.ListenURL = pgtest.AppURL(t, db, app)
			}
			c := pgqueue.New(pgtest.AppPool(t, db, poolApp, 8), cfg)
			type start struct {
				name string
				id   int64
			}
			started, causes, release := make(chan start, 8), make(chan error, 8), make(chan struct{})
			reg := worker.NewRegistry()
			worker.Add(reg, func(ctx context.Context, job *worker.Job[listenArgs]) error {
				started <- start{job.Args.Name, job.ID}
				select {
				case <-release:
					return nil
				case <-ctx.Done():
					causes <- context.Cause(ctx)
					return ctx.Err()
				}
			})
			queues := []string{"a", "b", "c"}
			startWorker(t, c, reg, worker.Config{
				Queues: map[string]int{"a": 2, "b": 2, "c": 2}, PollInterval: time.Hour, Lease: time.Hour,
				Logger: slog.New(slog.NewTextHandler(workerLogs, nil)),
			})
			defer close(release)

			pids := pgtest.Listeners(t, db, app)
			if len(pids) != 1 {
				t.Fatalf("LISTEN connections %v, want 1", pids)
			}
			var killed bool
			if err := db.Pool.QueryRow(ctx, `SELECT pg_terminate_backend($1)`, pids[0]).Scan(&killed); err != nil || !killed {
				t.Fatalf("terminate the LISTEN connection: %v, %v", killed, err)
			}
			testwatch.WaitFor(t, 10*time.Second, "a new LISTEN connection", func() bool {
				p := pgtest.Listeners(t, db, app)
				return len(p) == 1 && p[0] != pids[0]
			})
			// The new connection LISTENs on the channels in order, the
			// signal channel last: once it shows that, all are in place.
			testwatch.WaitFor(t, 10*time.Second, "the new connection to LISTEN on every channel", func() bool {
				var n int
				err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name = $1 AND query = 'LISTEN "jobfence_signal"'`, app).Scan(&n)
				return err == nil && n == 1
			})
			logs := clientLogs.String()
			if !strings.Contains(logs, "LISTEN connection lost") || !strings.Contains(logs, "channels=jobfence_cancel,jobfence_insert,jobfence_pause,jobfence_signal") {
				t.Fatalf("client logs do not report the lost LISTEN of all four channels:\n%s", logs)
			}
			testwatch.WaitFor(t, 10*time.Second, "the LISTEN connection back, logged", func() bool {
				return strings.Contains(clientLogs.String(), "LISTEN connection back")
			})

			ids := map[string]int64{}
			for _, q := range queues {
				at := time.Now()
				res, err := c.Insert(ctx, listenArgs{Name: q}, &queue.InsertOpts{Queue: q})
				if err != nil {
					t.Fatal(err)
				}
				select {
				case s := <-started:
					if s.name != q {
						t.Fatalf("job of queue %s started, want %s", s.name, q)
					}
					ids[q] = s.id
					t.Logf("queue %s: job started %s after its enqueue", q, time.Since(at))
				case <-time.After(5 * time.Second):
					t.Fatalf("job %d of queue %s did not start within 5s: no wake-up after the reconnect", res.ID, q)
				}
			}

			at := time.Now()
			if err := c.Cancel(ctx, ids["b"]); err != nil {
				t.Fatal(err)
			}
			select {
			case cause := <-causes:
				if !errors.Is(cause, worker.ErrJobCancelled) {
					t.Fatalf("cancelled handler's cause %v, want ErrJobCancelled (by notification)", cause)
				}
				t.Logf("cancel reached the handler %s after Cancel", time.Since(at))
			case <-time.After(5 * time.Second):
				t.Fatal("the cancel notification did not arrive within 5s after the reconnect")
			}

			at = time.Now()
			if err := c.PauseQueue(ctx, "c", "test"); err != nil {
				t.Fatal(err)
			}
			testwatch.WaitFor(t, 5*time.Second, "the pause of c to reach the worker", func() bool {
				p, _ := pauseLogs(workerLogs, "c")
				return p == 1
			})
			t.Logf("pause reached the worker %s after PauseQueue", time.Since(at))
			if p := pgtest.Listeners(t, db, app); len(p) != 1 {
				t.Fatalf("LISTEN connections after the reconnect: %v, want 1", p)
			}
		})
	}
}
