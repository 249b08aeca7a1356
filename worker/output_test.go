package worker_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

type outputArgs struct {
	N    int  `json:"n"`
	Big  bool `json:"big"`
	Fail bool `json:"fail"`
}

func (outputArgs) Kind() string { return "output" }

type outputTxArgs struct {
	N int `json:"n"`
}

func (outputTxArgs) Kind() string { return "output_tx" }

type charge struct {
	ChargeID string `json:"charge_id"`
	Cents    int    `json:"cents"`
}

// TestRecordOutput: a plain and a transactional handler record typed
// output, which the completion stores and Get reads back; an output past
// Config.MaxOutputBytes is refused with a clear error and nothing is
// stored; a failed attempt's output is not stored; outside a handler
// RecordOutput says so.
func TestRecordOutput(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	reg := worker.NewRegistry()
	tooLarge := make(chan error, 1)
	worker.Add(reg, func(ctx context.Context, job *worker.Job[outputArgs]) error {
		if err := worker.RecordOutput(ctx, charge{ChargeID: "ch_" + string(rune('a'+job.Args.N)), Cents: 100 * job.Args.N}); err != nil {
			return err
		}
		if job.Args.Big {
			err := worker.RecordOutput(ctx, strings.Repeat("x", 300))
			tooLarge <- err
			return nil
		}
		if job.Args.Fail {
			return errors.New("failed after recording")
		}
		return nil
	})
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[outputTxArgs]) error {
		return worker.RecordOutput(ctx, map[string]int{"n": job.Args.N})
	})
	startWorker(t, c, reg, worker.Config{MaxOutputBytes: 256, PollInterval: 50 * time.Millisecond})
	plain, err := c.Insert(ctx, outputArgs{N: 2}, nil)
	if err != nil {
		t.Fatal(err)
	}
	big, err := c.Insert(ctx, outputArgs{N: 3, Big: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	failed, err := c.Insert(ctx, outputArgs{N: 4, Fail: true}, &queue.InsertOpts{MaxAttempts: 1})
	if err != nil {
		t.Fatal(err)
	}
	tx, err := c.Insert(ctx, outputTxArgs{N: 7}, nil)
	if err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "every job ended", func() bool {
		for _, id := range []int64{plain.ID, big.ID, failed.ID, tx.ID} {
			if !stateOf(t, c, id).State.Final() {
				return false
			}
		}
		return true
	})
	var got charge
	if j := stateOf(t, c, plain.ID); json.Unmarshal(j.Output, &got) != nil || got != (charge{ChargeID: "ch_c", Cents: 200}) {
		t.Fatalf("plain job's output = %s, want its charge", j.Output)
	}
	if j := stateOf(t, c, tx.ID); string(j.Output) != `{"n": 7}` {
		t.Fatalf("transactional job's output = %s", j.Output)
	}
	err = <-tooLarge
	want := "jobfence: job output too large: job " + jsonInt(big.ID) + "'s output is 302 bytes of JSON, more than the 256 of Config.MaxOutputBytes; record a reference (a key, a URL) to something stored elsewhere"
	if !errors.Is(err, worker.ErrOutputTooLarge) || err.Error() != want {
		t.Fatalf("too large: %v\nwant %s", err, want)
	}
	if j := stateOf(t, c, big.ID); json.Unmarshal(j.Output, &got) != nil || got.Cents != 300 {
		t.Fatalf("the refused output replaced what was recorded before: %s", j.Output)
	}
	if j := stateOf(t, c, failed.ID); j.State != queue.StateDiscarded || j.Output != nil {
		t.Fatalf("failed job: %s with output %s, want discarded without output", j.State, j.Output)
	}
	if err := worker.RecordOutput(ctx, 1); !errors.Is(err, worker.ErrNotInHandler) {
		t.Fatalf("outside a handler: %v", err)
	}
}

func jsonInt(n int64) string {
	b, _ := json.Marshal(n)
	return string(b)
}
