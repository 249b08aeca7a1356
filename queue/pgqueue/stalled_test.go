package pgqueue_test

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// alive says whether server process pid is still there.
func alive(t *testing.T, db *pgtest.DB, pid uint32) bool {
	t.Helper()
	var ok bool
	if err := db.Pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)`, int32(pid)).Scan(&ok); err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestStalledSessionIsEnded: a client that stopped after sending part of
// a batch (BEGIN and an update of a job's row, not the rest) leaves its
// session waiting with the row locked, and no timeout of the server's
// ends it, the idle bound included. EndStalledSessions ends it once it
// has been seen waiting there for Config.StalledSession, not at the first
// sight, and the row is free again; so is one stopped after it took a
// queue's claim turn. It leaves alone a session idle in a
// transaction holding the same table (the idle bound's), and one stalled
// mid-batch holding nothing of jobfence's.
func TestStalledSessionIsEnded(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := pgqueue.New(db.Pool, pgqueue.Config{StalledSession: time.Second})
	var ids []int64
	for range 2 {
		res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, res.ID)
	}

	stalled := pgtest.StallMidBatch(t, db,
		"BEGIN",
		"SELECT set_config('idle_in_transaction_session_timeout', '500', true)",
		"UPDATE jobfence_jobs SET priority = priority WHERE id = "+strconv.FormatInt(ids[0], 10))
	// A claim's batch stopped after it took its queue's claim turn.
	turn := pgtest.StallMidBatch(t, db, "BEGIN",
		"SELECT pg_advisory_xact_lock('jobfence_jobs'::regclass::oid::int, hashtext('default') # 0)")
	elsewhere := pgtest.StallMidBatch(t, db, "BEGIN", "SELECT count(*) FROM pg_class")
	idle, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Rollback(context.Background())
	if _, err := idle.Exec(ctx, "SELECT id FROM jobfence_jobs WHERE id = $1 FOR UPDATE", ids[1]); err != nil {
		t.Fatal(err)
	}
	// The stalled session holds the row, idle bound or not.
	testwatch.WaitFor(t, 30*time.Second, "the stalled batch to update the job's row", func() bool {
		var locks int
		err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE pid = $1 AND locktype = 'transactionid' AND granted`, int32(stalled)).Scan(&locks)
		return err == nil && locks == 1
	})

	first, err := c.EndStalledSessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first != 0 {
		t.Fatalf("the first look ended %d sessions, want none: a session is ended only once seen stalled for the bound", first)
	}
	ended := 0
	testwatch.WaitFor(t, 30*time.Second, "the stalled sessions to be ended", func() bool {
		n, err := c.EndStalledSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ended += n
		return !alive(t, db, stalled) && !alive(t, db, turn)
	})
	if ended != 2 {
		t.Fatalf("EndStalledSessions ended %d sessions, want the two stalled holding jobfence's locks", ended)
	}
	if !alive(t, db, elsewhere) {
		t.Fatal("a session stalled mid-batch holding nothing of jobfence's was ended")
	}
	if _, err := idle.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatalf("the session idle in its transaction was ended: %v", err)
	}
	// The row is free: an update of it does not wait.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SET LOCAL lock_timeout = '5s'"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "UPDATE jobfence_jobs SET priority = priority WHERE id = $1", ids[0]); err != nil {
		t.Fatalf("the stalled session's row is still locked: %v", err)
	}
}

// TestStalledSessionCheckOff: a negative Config.StalledSession turns the
// check off.
func TestStalledSessionCheckOff(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{StalledSession: -1})
	stalled := pgtest.StallMidBatch(t, db, "BEGIN", "LOCK TABLE jobfence_queues IN ROW EXCLUSIVE MODE")
	for range 3 {
		if n, err := c.EndStalledSessions(ctx); err != nil || n != 0 {
			t.Fatalf("EndStalledSessions with the check off: %d, %v; want 0, nil", n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !alive(t, db, stalled) {
		t.Fatal("the stalled session was ended with the check off")
	}
}

// slowRows yields n rows of a COPY into jobfence_jobs, one every gap: a
// client that is slow, not stopped.
type slowRows struct {
	n   int
	gap time.Duration
}

func (r *slowRows) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, io.EOF
	}
	time.Sleep(r.gap)
	r.n--
	return copy(p, "default\tk\t{}\n"), nil
}

// TestSlowCopyIsNotEnded: a COPY whose client sends a row at a time,
// slower than Config.StalledSession in all but each row's gap, waits for
// its client most of the time, holding the jobs table; it is making
// progress (its bytes read grow), and EndStalledSessions leaves it.
func TestSlowCopyIsNotEnded(t *testing.T) {
	db := pgtest.New(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c := pgqueue.New(db.Pool, pgqueue.Config{StalledSession: 1500 * time.Millisecond})
	conn, err := pgconn.Connect(ctx, db.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	const rows = 15
	copied := make(chan error, 1)
	go func() {
		tag, err := conn.CopyFrom(ctx, &slowRows{n: rows, gap: 200 * time.Millisecond}, "COPY jobfence_jobs (queue, kind, args) FROM STDIN")
		if err == nil && tag.RowsAffected() != rows {
			err = fmt.Errorf("copied %d rows, want %d", tag.RowsAffected(), rows)
		}
		copied <- err
	}()
	ended := 0
	for {
		select {
		case err := <-copied:
			if err != nil {
				t.Fatalf("the slow COPY: %v", err)
			}
			if ended != 0 {
				t.Fatalf("EndStalledSessions ended %d sessions during a COPY that kept sending", ended)
			}
			return
		case <-time.After(100 * time.Millisecond):
		}
		n, err := c.EndStalledSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		ended += n
	}
}
