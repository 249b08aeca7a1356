package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// logsOf returns job id's stored logs, read by Get.
func logsOf(t *testing.T, c *pgqueue.Client, id int64) []queue.AttemptLogs {
	t.Helper()
	j, err := c.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return j.Logs
}

// line is one record of message m.
func line(m, attrs string) []queue.LogRecord {
	return []queue.LogRecord{{At: time.Now().UTC(), Level: "INFO", Message: m, Attrs: attrs}}
}

// TestRecordLogsIsFenced: an attempt's logs are stored only while the
// job runs under its fence, keyed by it. Once the first attempt's lease
// ran out and a second attempt claimed the job, the first's write returns
// a *queue.StaleFenceError and stores nothing; each attempt's logs read
// back by Get beside its number and fence, oldest first, with their
// dropped count, passwords removed, also once the completed job moved to
// the finished jobs' table; a write after the completion is stale too.
func TestRecordLogsIsFenced(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	if _, err := c.MaintainFinished(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k"})
	if err != nil {
		t.Fatal(err)
	}
	if logs := logsOf(t, c, res.ID); logs != nil {
		t.Fatalf("a new job's logs: %+v, want none", logs)
	}
	old := claimOne(t, c, "default")
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_jobs SET lease_expires_at = now() - interval '1 second' WHERE id = $1`, old.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Rescue(ctx, queue.RescueParams{Limit: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Promote(ctx, 10); err != nil {
		t.Fatal(err)
	}
	cur := claimOne(t, c, "default")
	err = c.RecordLogs(ctx, old.Lease(), queue.AttemptLogs{Attempt: old.Attempt, Records: line("stale", "")}, 10)
	var sf *queue.StaleFenceError
	if !errors.As(err, &sf) || sf.Fence != old.Fence ||
		err.Error() != fmt.Sprintf("jobfence: job %d: fence %d is stale: the claim was lost to a newer owner; nothing was written", old.ID, old.Fence) {
		t.Fatalf("the stale attempt's logs = %v, want a StaleFenceError of fence %d", err, old.Fence)
	}
	if logs := logsOf(t, c, res.ID); logs != nil {
		t.Fatalf("logs after the stale attempt's write: %+v, want none", logs)
	}
	secret := "postgres://app:s3cretpass@db.internal/app"
	if err := c.RecordLogs(ctx, cur.Lease(), queue.AttemptLogs{Attempt: cur.Attempt, Records: line("charging", "dsn="+secret), Dropped: 3}, 10); err != nil {
		t.Fatal(err)
	}
	if stale := finish(t, c, queue.Finish{Lease: cur.Lease(), Outcome: queue.OutcomeComplete}); len(stale) > 0 {
		t.Fatalf("completion stale: %v", stale)
	}
	if err := c.RecordLogs(ctx, cur.Lease(), queue.AttemptLogs{Attempt: cur.Attempt, Records: line("after", "")}, 10); !errors.Is(err, queue.ErrStaleFence) {
		t.Fatalf("logs after the completion = %v, want a stale fence", err)
	}
	var moved int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs_finished WHERE id = $1`, res.ID).Scan(&moved); err != nil || moved != 1 {
		t.Fatalf("the completed job in jobfence_jobs_finished: %d, %v", moved, err)
	}
	logs := logsOf(t, c, res.ID)
	if len(logs) != 1 || logs[0].Attempt != cur.Attempt || logs[0].Fence != cur.Fence || logs[0].Dropped != 3 || logs[0].At.IsZero() ||
		len(logs[0].Records) != 1 || logs[0].Records[0].Message != "charging" {
		t.Fatalf("logs %+v, want the second attempt's one record, 3 dropped", logs)
	}
	if a := logs[0].Records[0].Attrs; strings.Contains(a, "s3cretpass") || a != "dsn=postgres://app:"+pgqueue.RedactMask+"@db.internal/app" {
		t.Fatalf("stored attributes %q, want the password masked", a)
	}
}

// TestRecordLogsKeepsTheLastAttempts: storing an attempt's logs deletes
// the job's logs of the attempts before the last keep, and the latest
// entry counts them; Get returns the kept ones oldest first, each with
// its attempt. A job deleted on completion stores none (nothing would
// prune them), and that is no stale fence.
func TestRecordLogsKeepsTheLastAttempts(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", MaxAttempts: 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 4; i++ {
		j := claimOne(t, c, "default")
		if err := c.RecordLogs(ctx, j.Lease(), queue.AttemptLogs{Attempt: j.Attempt, Records: line(fmt.Sprintf("try %d", i), "")}, 2); err != nil {
			t.Fatal(err)
		}
		if stale := finish(t, c, queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeRetry,
			Error: &queue.AttemptError{Attempt: j.Attempt, At: time.Now(), Error: "boom"}}); len(stale) > 0 {
			t.Fatalf("retry stale: %v", stale)
		}
		if _, err := c.Promote(ctx, 10); err != nil {
			t.Fatal(err)
		}
	}
	logs := logsOf(t, c, res.ID)
	if len(logs) != 2 || logs[0].Attempt != 3 || logs[1].Attempt != 4 || logs[0].Records[0].Message != "try 3" ||
		logs[1].Records[0].Message != "try 4" || logs[1].Pruned != 2 {
		t.Fatalf("logs %+v, want attempts 3 and 4, the latest counting 2 pruned", logs)
	}
	gone, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Queue: "gone", DeleteOnComplete: true})
	if err != nil {
		t.Fatal(err)
	}
	j := claimOne(t, c, "gone")
	if err := c.RecordLogs(ctx, j.Lease(), queue.AttemptLogs{Attempt: j.Attempt, Records: line("m", "")}, 2); err != nil {
		t.Fatalf("logs of a job deleted on completion: %v, want nil", err)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_attempt_logs WHERE job_id = $1`, gone.ID).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d logs stored for a job deleted on completion (%v), want none", n, err)
	}
}
