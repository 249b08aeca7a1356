package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type logArgs struct {
	Lines int `json:"lines"`
}

func (logArgs) Kind() string { return "logs" }

// countingLogs is the real backend, counting its logs' writes and their
// stale refusals.
type countingLogs struct {
	*pgqueue.Client
	writes, stale atomic.Int32
}

func (c *countingLogs) RecordLogs(ctx context.Context, writes []queue.LogsWrite, keep int) ([]queue.Lease, error) {
	stale, err := c.Client.RecordLogs(ctx, writes, keep)
	c.writes.Add(int32(len(writes)))
	c.stale.Add(int32(len(stale)))
	return stale, err
}

// TestLoggerStoresEachAttempt: the records a handler writes through
// Logger are stored with their attempt: the failed first attempt's
// beside its error, the second's after its completion, each with its
// number, message, level and attributes (the logger's With and group
// ones too), below the stored level left out; every record also reaches
// the worker's logger with the job's attributes, the debug one too when
// that logger takes it. A job whose handler logs nothing sends no write
// and has no logs; outside a handler Logger is slog.Default().
func TestLoggerStoresEachAttempt(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	b := &countingLogs{Client: c}
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[logArgs]) error {
		log := worker.Logger(ctx)
		log.Debug("not stored")
		log.With("order", 42).WithGroup("card").Info("charging", "last4", "4242", slog.Group("3ds", "ok", true))
		if job.Attempt == 1 {
			log.Warn("gateway slow", "after", 3*time.Second)
			return errors.New("gateway timeout")
		}
		log.Info("charged")
		return nil
	})
	worker.Add(reg, func(ctx context.Context, job *worker.Job[silentArgs]) error { return nil })
	out := &logbuf.Buffer{}
	startWorker(t, b, reg, worker.Config{PollInterval: 50 * time.Millisecond, RetryPolicy: worker.ExponentialRetry{Max: time.Millisecond},
		PromoteInterval: 50 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{Level: slog.LevelDebug}))})

	silent, err := c.Insert(ctx, silentArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "the silent job's completion", func() bool { return stateOf(t, c, silent.ID).State == queue.StateCompleted })
	if n := b.writes.Load(); n != 0 || stateOf(t, c, silent.ID).Logs != nil {
		t.Fatalf("a job that logged nothing: %d logs' writes, logs %+v; want none", n, stateOf(t, c, silent.ID).Logs)
	}

	res, err := c.Insert(ctx, logArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "the job's completion", func() bool { return stateOf(t, c, res.ID).State == queue.StateCompleted })
	j := stateOf(t, c, res.ID)
	if len(j.Logs) != 2 || len(j.Errors) != 1 || j.Errors[0].Attempt != 1 {
		t.Fatalf("logs %+v, errors %+v; want two attempts' logs and the first attempt's error", j.Logs, j.Errors)
	}
	charging := "order=42 card.last4=4242 card.3ds.ok=true"
	for i, want := range [][]string{
		{"INFO charging " + charging, "WARN gateway slow after=3s"},
		{"INFO charging " + charging, "INFO charged "},
	} {
		l := j.Logs[i]
		var got []string
		for _, r := range l.Records {
			got = append(got, r.Level+" "+r.Message+" "+r.Attrs)
			if r.At.IsZero() {
				t.Errorf("attempt %d: record %q has no time", l.Attempt, r.Message)
			}
		}
		if l.Attempt != i+1 || l.Dropped != 0 || strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("attempt %d's logs (fence %d) %q, %d dropped; want attempt %d's %q", l.Attempt, l.Fence, got, l.Dropped, i+1, want)
		}
	}
	if j.Logs[1].Fence != j.Fence {
		t.Errorf("the second attempt's logs have fence %d, the job %d", j.Logs[1].Fence, j.Fence)
	}
	// Each record reaches the worker's logger with the job's attributes
	// (after the worker's own).
	lines := strings.Split(out.String(), "\n")
	for _, want := range [][2]string{
		{`level=DEBUG msg="not stored"`, fmt.Sprintf("job=%d kind=logs queue=default attempt=1", res.ID)},
		{`level=WARN msg="gateway slow"`, fmt.Sprintf("job=%d kind=logs queue=default attempt=1", res.ID)},
		{`level=INFO msg=charged`, fmt.Sprintf("job=%d kind=logs queue=default attempt=2", res.ID)},
	} {
		found := false
		for _, l := range lines {
			found = found || (strings.Contains(l, want[0]) && strings.Contains(l, want[1]))
		}
		if !found {
			t.Errorf("the worker's log lacks a line with %q and %q:\n%s", want[0], want[1], out.String())
		}
	}
	if worker.Logger(ctx) != slog.Default() {
		t.Error("Logger outside a handler is not slog.Default()")
	}
}

// TestLoggerBounds: past LogsConfig.MaxRecords or MaxBytes, the earliest
// records are dropped and counted, and a record larger than MaxBytes on
// its own is dropped; with Disabled nothing is stored while the worker's
// logger still gets every record.
func TestLoggerBounds(t *testing.T) {
	for _, tt := range []struct {
		name    string
		cfg     worker.LogsConfig
		lines   int
		kept    []string
		dropped int
	}{
		{"records", worker.LogsConfig{MaxRecords: 3}, 10, []string{"line 7", "line 8", "line 9"}, 8},
		// Each record is "line N" (6 bytes) with n=N (3): 9 bytes, 4 fit
		// in 40, the 100-byte one never does.
		{"bytes", worker.LogsConfig{MaxBytes: 40}, 6, []string{"line 2", "line 3", "line 4", "line 5"}, 3},
		{"disabled", worker.LogsConfig{Disabled: true}, 3, nil, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			db := pgtest.New(t)
			ctx := context.Background()
			c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
			b := &countingLogs{Client: c}
			reg := worker.NewRegistry()
			worker.Add(reg, func(ctx context.Context, job *worker.Job[logArgs]) error {
				log := worker.Logger(ctx)
				log.Info(strings.Repeat("x", 100))
				for i := range job.Args.Lines {
					log.Info(fmt.Sprintf("line %d", i), "n", i)
				}
				return nil
			})
			out := &logbuf.Buffer{}
			startWorker(t, b, reg, worker.Config{PollInterval: 50 * time.Millisecond, AttemptLogs: tt.cfg,
				Logger: slog.New(slog.NewTextHandler(out, nil))})
			res, err := c.Insert(ctx, logArgs{Lines: tt.lines}, nil)
			if err != nil {
				t.Fatal(err)
			}
			testwatch.WaitFor(t, 30*time.Second, "the job's completion", func() bool { return stateOf(t, c, res.ID).State == queue.StateCompleted })
			logs := stateOf(t, c, res.ID).Logs
			if tt.kept == nil {
				if logs != nil || b.writes.Load() != 0 {
					t.Fatalf("logs %+v after %d writes, want none", logs, b.writes.Load())
				}
			} else {
				var got []string
				for _, r := range logs[0].Records {
					got = append(got, r.Message)
				}
				if len(logs) != 1 || strings.Join(got, ",") != strings.Join(tt.kept, ",") || logs[0].Dropped != tt.dropped {
					t.Fatalf("logs %q, %d dropped; want %q, %d dropped", got, logs[0].Dropped, tt.kept, tt.dropped)
				}
			}
			if n := strings.Count(out.String(), "msg=\"line "); n != tt.lines {
				t.Fatalf("the worker's log has %d of the %d lines:\n%s", n, tt.lines, out.String())
			}
		})
	}
}

// TestLoggerOfStaleAttemptStoresNothing: an attempt whose lease ran out
// (its heartbeats frozen) while its handler, deaf to its context, kept
// logging, the job rescued and completed by the next attempt, stores
// none of its records: the job's logs are the second attempt's alone,
// under its fence, and the first attempt's records are in the worker's
// log.
func TestLoggerOfStaleAttemptStoresNothing(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	res, err := c.Insert(ctx, logArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	first, done := make(chan struct{}), make(chan struct{})
	release := make(chan struct{})
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[logArgs]) error {
		if job.Attempt == 1 {
			worker.Logger(ctx).Info("stale before")
			close(first)
			<-release // deaf to its context, as a paused process is
			worker.Logger(ctx).Info("stale after")
			close(done)
			return nil
		}
		worker.Logger(ctx).Info("current")
		return nil
	}, worker.HandlerOptions{Timeout: -1})
	hb := &blockingHeartbeats{Client: c, release: make(chan struct{})}
	defer close(hb.release)
	out := &logbuf.Buffer{}
	startWorker(t, hb, reg, worker.Config{Lease: 2 * time.Second, RescueInterval: 100 * time.Millisecond,
		PollInterval: 50 * time.Millisecond, Queues: map[string]int{"default": 4}, Logger: slog.New(slog.NewTextHandler(out, nil))})
	wait(t, first, "the first attempt's record")
	testwatch.WaitFor(t, 30*time.Second, "the second attempt's completion", func() bool { return stateOf(t, c, res.ID).State == queue.StateCompleted })
	close(release)
	wait(t, done, "the stale attempt's return")
	// The worker logs the stale attempt's end after anything it did
	// with its records: lost, or its late outcome refused.
	testwatch.WaitFor(t, 30*time.Second, "the stale attempt's end in the log", func() bool {
		return strings.Contains(out.String(), "handler ended after its job was lost") || strings.Contains(out.String(), "outcome rejected: stale fence")
	})
	j := stateOf(t, c, res.ID)
	if len(j.Logs) != 1 || j.Logs[0].Attempt != 2 || j.Logs[0].Fence != j.Fence || len(j.Logs[0].Records) != 1 || j.Logs[0].Records[0].Message != "current" {
		t.Fatalf("logs %+v, want the second attempt's alone", j.Logs)
	}
	if !strings.Contains(out.String(), "stale before") {
		t.Fatalf("the worker's log lacks the stale attempt's record:\n%s", out.String())
	}
}

type txLogArgs struct{}

func (txLogArgs) Kind() string { return "tx_logs" }

// TestLoggerOfTxHandler: a transactional handler's records are stored
// before its transaction's fenced completion, and read back with the
// completed job.
func TestLoggerOfTxHandler(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	b := &countingLogs{Client: c}
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[txLogArgs]) error {
		worker.Logger(ctx).Info("in the transaction", "tx", true)
		return nil
	})
	startWorker(t, b, reg, worker.Config{PollInterval: 50 * time.Millisecond})
	res, err := c.Insert(ctx, txLogArgs{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "the job's completion", func() bool { return stateOf(t, c, res.ID).State == queue.StateCompleted })
	logs := stateOf(t, c, res.ID).Logs
	if len(logs) != 1 || logs[0].Attempt != 1 || len(logs[0].Records) != 1 || logs[0].Records[0].Message != "in the transaction" ||
		logs[0].Records[0].Attrs != "tx=true" || b.writes.Load() != 1 {
		t.Fatalf("logs %+v after %d writes, want the attempt's one record, written once", logs, b.writes.Load())
	}
}
