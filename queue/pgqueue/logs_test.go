package pgqueue_test

import (
	"context"
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

// record stores logs for the attempt l names, failing t on an error, and
// returns the stale leases.
func record(t *testing.T, c *pgqueue.Client, keep int, ws ...queue.LogsWrite) []queue.Lease {
	t.Helper()
	stale, err := c.RecordLogs(context.Background(), ws, keep)
	if err != nil {
		t.Fatal(err)
	}
	return stale
}

// line is one record of message m.
func line(m, attrs string) []queue.LogRecord {
	return []queue.LogRecord{{At: time.Now().UTC(), Level: "INFO", Message: m, Attrs: attrs}}
}

// TestRecordLogsIsFenced: an attempt's logs are stored only while the
// job runs under its fence, keyed by it. Once the first attempt's lease
// ran out and a second attempt claimed the job, the first's write, in
// one batch with the second's, is reported stale and stores nothing;
// the second's reads back by Get beside its number and fence, with its
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
	secret := "postgres://app:s3cretpass@db.internal/app"
	stale := record(t, c, 10, queue.LogsWrite{Lease: old.Lease(), Logs: queue.AttemptLogs{Attempt: old.Attempt, Records: line("stale", "")}},
		queue.LogsWrite{Lease: cur.Lease(), Logs: queue.AttemptLogs{Attempt: cur.Attempt, Records: line("charging", "dsn="+secret), Dropped: 3}})
	if len(stale) != 1 || stale[0] != old.Lease() {
		t.Fatalf("stale leases %v, want the first attempt's %v", stale, old.Lease())
	}
	if stale := finish(t, c, queue.Finish{Lease: cur.Lease(), Outcome: queue.OutcomeComplete}); len(stale) > 0 {
		t.Fatalf("completion stale: %v", stale)
	}
	if stale := record(t, c, 10, queue.LogsWrite{Lease: cur.Lease(), Logs: queue.AttemptLogs{Attempt: cur.Attempt, Records: line("after", "")}}); len(stale) != 1 {
		t.Fatalf("logs after the completion: stale %v, want its lease", stale)
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
		if stale := record(t, c, 2, queue.LogsWrite{Lease: j.Lease(), Logs: queue.AttemptLogs{Attempt: j.Attempt, Records: line(fmt.Sprintf("try %d", i), "")}}); len(stale) > 0 {
			t.Fatalf("stale %v", stale)
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
	if stale := record(t, c, 2, queue.LogsWrite{Lease: j.Lease(), Logs: queue.AttemptLogs{Attempt: j.Attempt, Records: line("m", "")}}); len(stale) > 0 {
		t.Fatalf("logs of a job deleted on completion: stale %v, want none", stale)
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_attempt_logs WHERE job_id = $1`, gone.ID).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d logs stored for a job deleted on completion (%v), want none", n, err)
	}
}
