package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
	"github.com/jobfence/jobfence/workflow"
)

type mailArgs struct {
	N int `json:"n"`
}

func (mailArgs) Kind() string { return "mail" }

type mailsDoneArgs struct {
	Campaign string `json:"campaign"`
}

func (mailsDoneArgs) Kind() string { return "mails_done" }

// TestBatchCallback: the callback runs once, after every member has
// ended (one retried until discarded, one cancelled), and reads each
// member's outcome: state, output, error.
func TestBatchCallback(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet()})
	var mu sync.Mutex
	var seen [][]workflow.Member
	var early []string
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[mailArgs]) error {
		switch job.Args.N {
		case 2:
			return worker.JobCancel(errors.New("unsubscribed"))
		case 3:
			return fmt.Errorf("bounced (attempt %d)", job.Attempt)
		}
		return worker.RecordOutput(ctx, fmt.Sprintf("msg-%d", job.Args.N))
	})
	worker.Add(reg, func(ctx context.Context, job *worker.Job[mailsDoneArgs]) error {
		members, err := workflow.BatchMembers(ctx)
		if err != nil {
			return err
		}
		mu.Lock()
		defer mu.Unlock()
		for _, m := range members {
			if !m.State.Final() {
				early = append(early, fmt.Sprintf("member %d is %s", m.Index, m.State))
			}
		}
		seen = append(seen, members)
		return nil
	})
	b := workflow.NewBatch("campaign").OnComplete(mailsDoneArgs{Campaign: "spring"}, nil)
	for i := range 4 {
		var opts *queue.InsertOpts
		if i == 3 {
			opts = &queue.InsertOpts{MaxAttempts: 3}
		}
		b.Add(mailArgs{N: i}, opts)
	}
	res, err := workflow.InsertBatch(ctx, c, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Members) != 4 || res.Callback == 0 || res.ID == "" {
		t.Fatalf("result %+v", res)
	}
	start(t, c, reg, worker.Config{PollInterval: 100 * time.Millisecond, RetryPolicy: worker.ExponentialRetry{Max: time.Millisecond}})
	testwatch.WaitFor(t, time.Minute, "the callback completed", func() bool {
		j, err := c.Get(ctx, res.Callback)
		return err == nil && j.State == queue.StateCompleted
	})
	// One job, completed (a final state) at its first attempt: it ran once.
	if j, err := c.Get(ctx, res.Callback); err != nil || j.Attempt != 1 {
		t.Fatalf("callback %+v, %v; want attempt 1", j, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || len(early) > 0 {
		t.Fatalf("callback ran %d times; members not ended: %v", len(seen), early)
	}
	got := seen[0]
	want := []struct {
		state   queue.State
		attempt int
		output  string
		err     string
	}{
		{queue.StateCompleted, 1, "msg-0", ""},
		{queue.StateCompleted, 1, "msg-1", ""},
		{queue.StateCancelled, 1, "", "jobfence: job cancelled: unsubscribed"},
		{queue.StateDiscarded, 3, "", "bounced (attempt 3)"},
	}
	if len(got) != len(want) {
		t.Fatalf("members %+v", got)
	}
	for i, m := range got {
		w := want[i]
		if m.Index != i || m.JobID != res.Members[i] || m.Kind != "mail" || m.State != w.state || m.Attempt != w.attempt || m.Error != w.err || m.Completed() != (w.state == queue.StateCompleted) {
			t.Errorf("member %d: %+v; want %+v", i, m, w)
		}
		var out string
		err := m.Decode(&out)
		if w.output != "" && (err != nil || out != w.output) {
			t.Errorf("member %d output %q, %v; want %q", i, out, err, w.output)
		}
		if w.output == "" && (!errors.Is(err, workflow.ErrNoOutput) || err.Error() != fmt.Sprintf("workflow: output of batch member %d (job %d): jobfence: no output: it is %s", i, m.JobID, w.state)) {
			t.Errorf("member %d Decode: %v", i, err)
		}
	}
}

// TestBatchRefused: a batch without members or callback is refused with
// a message that says what to do; BatchMembers outside a callback says
// why it cannot answer.
func TestBatchRefused(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet()})
	for _, tc := range []struct {
		b    *workflow.Batch
		want string
	}{
		{workflow.NewBatch("empty").OnComplete(mailsDoneArgs{}, nil),
			`workflow: batch "empty": jobfence: invalid workflow: it has no members; Add at least one`},
		{workflow.NewBatch("nocb").Add(mailArgs{}, nil),
			`workflow: batch "nocb": jobfence: invalid workflow: it has no callback; set one with OnComplete (a batch without one is a plain InsertMany)`},
		{nil, "workflow: insert batch: nil batch"},
	} {
		_, err := workflow.InsertBatch(ctx, c, tc.b)
		if err == nil || err.Error() != tc.want || (tc.b != nil && !errors.Is(err, workflow.ErrInvalid)) {
			t.Errorf("InsertBatch: %v; want %q", err, tc.want)
		}
	}
	if _, err := workflow.BatchMembers(ctx); !errors.Is(err, workflow.ErrNotATask) {
		t.Fatalf("BatchMembers outside a handler: %v", err)
	}
	// From a member's handler: not the callback.
	got := make(chan error, 1)
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[mailArgs]) error {
		_, err := workflow.BatchMembers(ctx)
		got <- err
		return nil
	})
	worker.Add(reg, func(ctx context.Context, job *worker.Job[mailsDoneArgs]) error { return nil })
	if _, err := workflow.InsertBatch(ctx, c, workflow.NewBatch("one").Add(mailArgs{}, nil).OnComplete(mailsDoneArgs{}, nil)); err != nil {
		t.Fatal(err)
	}
	start(t, c, reg, worker.Config{PollInterval: 100 * time.Millisecond})
	select {
	case err := <-got:
		if !errors.Is(err, workflow.ErrNotACallback) || err.Error() != `workflow: batch members: jobfence: not a batch's callback: the task is "member-0"` {
			t.Fatalf("BatchMembers from a member: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("the member did not run")
	}
}
