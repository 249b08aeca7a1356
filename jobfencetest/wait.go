package jobfencetest

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// DefaultWaitFinal bounds WaitFinal when its ctx has no deadline.
const DefaultWaitFinal = 30 * time.Second

// waitFinalPoll is how often WaitFinal reads the jobs.
const waitFinalPoll = 20 * time.Millisecond

// WaitFinal waits until every job of ids is final (completed, discarded
// or cancelled), run by a started client (Client.Start) or any other
// worker of the database, and returns them as stored, in the order of
// ids. It waits until ctx ends, or DefaultWaitFinal when ctx has no
// deadline, and then fails t naming each job that is not final, with its
// state, attempts, last error and why it waits (a limit's slot, in the
// words of pgqueue.Client.WaitReason). A job that no longer exists (a
// DeleteOnComplete job deleted as it completed, or never inserted) fails
// t at once.
func WaitFinal(ctx context.Context, t TestingT, client Client, ids ...int64) []*queue.Job {
	t.Helper()
	if isNil(client) {
		t.Fatalf("jobfencetest: WaitFinal: nil client")
		return nil
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultWaitFinal)
		defer cancel()
	}
	jobs := make([]*queue.Job, len(ids))
	tick := time.NewTicker(waitFinalPoll)
	defer tick.Stop()
	for {
		done := true
		for i, id := range ids {
			if jobs[i] != nil && jobs[i].State.Final() {
				continue
			}
			j, err := client.PGQueue().Get(ctx, id)
			if err != nil {
				if ctx.Err() != nil {
					break
				}
				t.Fatalf("jobfencetest: WaitFinal: job %d: %v", id, err)
				return nil
			}
			jobs[i] = j
			done = done && j.State.Final()
		}
		if done && ctx.Err() == nil {
			return jobs
		}
		select {
		case <-tick.C:
			continue
		case <-ctx.Done():
		}
		t.Fatalf("jobfencetest: WaitFinal: %v: %d of %d jobs not final (is the client started, with these jobs' queues?): %s",
			context.Cause(ctx), notFinal(jobs), len(ids), describeWaiting(client, jobs, ids))
		return nil
	}
}

// notFinal counts the jobs not read final.
func notFinal(jobs []*queue.Job) int {
	n := 0
	for _, j := range jobs {
		if j == nil || !j.State.Final() {
			n++
		}
	}
	return n
}

// describeWaiting names each job of ids that jobs does not hold final,
// with its state and why it waits. It reads on a context of its own:
// WaitFinal's has ended.
func describeWaiting(client Client, jobs []*queue.Job, ids []int64) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var out []string
	for i, id := range ids {
		j := jobs[i]
		if j != nil && j.State.Final() {
			continue
		}
		if fresh, err := client.PGQueue().Get(ctx, id); err == nil {
			j = fresh
		}
		if j == nil {
			out = append(out, fmt.Sprintf("job %d: not read", id))
			continue
		}
		s := fmt.Sprintf("job %d (%s, queue %s): %s, attempt %d of %d", j.ID, j.Kind, j.Queue, j.State, j.Attempt, j.MaxAttempts)
		if len(j.Errors) > 0 {
			s += fmt.Sprintf(", last error %q", j.Errors[len(j.Errors)-1].Error)
		}
		if reason, err := client.PGQueue().WaitReason(ctx, id); err == nil && reason != "" {
			s += ", waits: " + reason
		} else if j.State == queue.StateScheduled || j.State == queue.StateRetryable {
			s += fmt.Sprintf(", runs at %s", j.ScheduledAt.Format(time.RFC3339))
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}
