package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// claimPaced claims up to n jobs of the default queue, as claim does,
// with c pacing itself as if its last claim had taken took: an hour keeps
// the claim from reading the queue's start, however slowly the test runs;
// zero lets it read from the start once the shortest head interval has
// passed since a claim last did (a slow claim before would stretch it).
func claimPaced(t *testing.T, c *pgqueue.Client, n int, took time.Duration) []*queue.Job {
	t.Helper()
	pgqueue.SetClaimTook(c, "default", took)
	return claim(t, c, "default", n, time.Minute)
}

// TestClaimCursor: claims from a backlog start after the jobs claimed
// before (the queue's claim position); a job of a higher priority than the
// position's is taken by the next claim; a job of the position's own
// priority that sorts before it (an earlier time) is claimed at once when
// the rest of the queue is taken, and otherwise within the interval.
func TestClaimCursor(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	enqueue := func(n, priority int, at time.Time) []int64 {
		t.Helper()
		ids := make([]int64, n)
		for i := range ids {
			r, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Priority: priority, ScheduledAt: at})
			if err != nil {
				t.Fatal(err)
			}
			ids[i] = r.ID
		}
		return ids
	}
	ids := enqueue(40, 2, time.Time{})
	first := claim(t, c, "default", 10, time.Minute)
	if len(first) != 10 || first[9].ID != ids[9] {
		t.Fatalf("first claim: %d jobs, want the backlog's first 10", len(first))
	}

	// An urgent job sorts before the cursor, in a higher band: the next
	// claim takes it first, then goes on after the cursor.
	urgent := enqueue(1, 1, time.Time{})[0]
	got := claim(t, c, "default", 10, time.Minute)
	if len(got) != 10 || got[0].ID != urgent || got[1].ID != ids[10] {
		t.Fatalf("second claim: %d jobs starting at %d, want the urgent job %d, then 9 from %d (after the cursor)", len(got), got[0].ID, urgent, ids[10])
	}
	// A job of the cursor's band stamped before it (a put-back, a late
	// commit) waits for a claim from the start: within the interval.
	early := enqueue(1, 2, first[0].ScheduledAt)[0]
	got = claimPaced(t, c, 10, time.Hour)
	if len(got) != 10 || got[0].ID != ids[19] {
		t.Fatalf("third claim: %d jobs starting at %d, want 10 from %d (after the cursor)", len(got), got[0].ID, ids[19])
	}
	time.Sleep(300 * time.Millisecond)
	got = claimPaced(t, c, 10, 0)
	if len(got) != 10 || got[0].ID != early {
		t.Fatalf("claim after the interval took %d jobs starting at %d, want the early job %d first", len(got), got[0].ID, early)
	}

	// The position stands at the queue's end; a claim that finds too
	// little after it looks before it in the same call.
	if rest := claim(t, c, "default", 100, time.Minute); len(rest) != 2 {
		t.Fatalf("draining claim took %d jobs, want the 2 left", len(rest))
	}
	more := enqueue(2, 2, time.Time{})
	if got := claim(t, c, "default", 1, time.Minute); len(got) != 1 || got[0].ID != more[0] {
		t.Fatalf("claim of 1 took %d jobs, want job %d", len(got), more[0])
	}
	late := enqueue(1, 2, first[0].ScheduledAt)[0]
	// A claim that finds too little after the position also reads its band
	// before it, in the same statement, unless any claim read from the
	// start within the retry interval (headRetryMax at most); its jobs come in the
	// queue's order, the late job first.
	time.Sleep(30 * time.Millisecond)
	got = claim(t, c, "default", 2, time.Minute)
	if len(got) != 2 || got[0].ID != late || got[1].ID != more[1] {
		t.Fatalf("claim of 2 took %d jobs, want the late job %d before the cursor, then job %d after it", len(got), late, more[1])
	}
}

// TestClaimPositionShared: a client's claim starts after the jobs another
// client claimed (the queue's claim position is the fleet's, not each
// client's), so a job that sorts between the two clients' last jobs
// waits for a claim from the queue's start.
func TestClaimPositionShared(t *testing.T) {
	a, db := newClient(t)
	b := pgqueue.New(db.Pool, pgqueue.Config{})
	ctx := context.Background()
	// One at a time: each job's scheduled_at is its own transaction's.
	for range 40 {
		if _, err := a.Enqueue(ctx, queue.EnqueueParams{Kind: "k"}); err != nil {
			t.Fatal(err)
		}
	}
	first := claim(t, a, "default", 10, time.Minute)
	second := claim(t, b, "default", 10, time.Minute)
	if len(first) != 10 || len(second) != 10 || second[0].ID != first[9].ID+1 {
		t.Fatalf("claims of a and b: %d and %d jobs, want 10 each, b's after a's", len(first), len(second))
	}
	var pos int64
	if err := db.Pool.QueryRow(ctx, "SELECT id FROM jobfence_claim_hints WHERE queue = 'default'").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	if pos != second[9].ID {
		t.Fatalf("claim position at job %d, want b's last job %d", pos, second[9].ID)
	}
	// Between a's last job and the position: right after b's fifth job.
	between, err := a.Enqueue(ctx, queue.EnqueueParams{Kind: "k", ScheduledAt: second[4].ScheduledAt})
	if err != nil {
		t.Fatal(err)
	}
	third := claimPaced(t, a, 10, time.Hour)
	if len(third) != 10 || third[0].ID != pos+1 {
		t.Fatalf("a's claim took %d jobs from job %d, want 10 from job %d, after the position", len(third), third[0].ID, pos+1)
	}
	time.Sleep(300 * time.Millisecond)
	if got := claimPaced(t, b, 1, 0); len(got) != 1 || got[0].ID != between.ID {
		t.Fatalf("claim from the start took %d jobs, want job %d", len(got), between.ID)
	}
}

// TestClaimWrapMovesPositionBack: a claim that takes jobs after the
// position and fills its limit with jobs before it (wrap) leaves the
// position at the last of those, since the jobs it left are between that
// job and the old position; the next claim starts there.
func TestClaimWrapMovesPositionBack(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	enqueue := func(at time.Time) int64 {
		t.Helper()
		r, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", ScheduledAt: at})
		if err != nil {
			t.Fatal(err)
		}
		return r.ID
	}
	for range 5 {
		enqueue(time.Time{})
	}
	first := claim(t, c, "default", 5, time.Minute)
	if len(first) != 5 {
		t.Fatalf("first claim took %d jobs, want 5", len(first))
	}
	after := enqueue(time.Time{})
	late := []int64{enqueue(first[0].ScheduledAt), enqueue(first[0].ScheduledAt), enqueue(first[0].ScheduledAt)}
	// No claim read from the queue's start within the retry interval.
	time.Sleep(30 * time.Millisecond)
	got := claimPaced(t, c, 3, time.Hour)
	if len(got) != 3 || got[0].ID != late[0] || got[1].ID != late[1] || got[2].ID != after {
		t.Fatalf("claim of 3 took %d jobs, want the late jobs %d and %d, then %d after the position", len(got), late[0], late[1], after)
	}
	var pos int64
	if err := db.Pool.QueryRow(ctx, "SELECT id FROM jobfence_claim_hints WHERE queue = 'default'").Scan(&pos); err != nil {
		t.Fatal(err)
	}
	if pos != late[1] {
		t.Fatalf("claim position at job %d, want the last late job claimed, %d", pos, late[1])
	}
	if got := claim(t, c, "default", 1, time.Minute); len(got) != 1 || got[0].ID != late[2] {
		t.Fatalf("next claim took %d jobs, want the late job %d after the position", len(got), late[2])
	}
}
