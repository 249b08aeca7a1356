package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestRegistry: Register upserts an instance's row, Workers lists it as
// live, Deregister removes it, and a row not seen for GoneIntervals of its
// interval is deleted by the next instance's Register.
func TestRegistry(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	started := time.Now().Add(-time.Minute).Truncate(time.Microsecond)
	a := queue.Instance{ID: "a", Host: "host-a", PID: 41, Queues: []string{"mail", "default"}, StartedAt: started, Interval: time.Minute}
	if err := c.Register(ctx, a); err != nil {
		t.Fatal(err)
	}
	a.Running, a.Completed, a.Stale, a.Lost = 3, 120, 2, 1
	if err := c.Register(ctx, a); err != nil {
		t.Fatal(err)
	}
	ws, err := c.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 1 {
		t.Fatalf("Workers = %+v, want one", ws)
	}
	w := ws[0]
	if w.ID != "a" || w.Host != "host-a" || w.PID != 41 || len(w.Queues) != 2 || w.Queues[0] != "default" || w.Queues[1] != "mail" ||
		w.Running != 3 || w.Completed != 120 || w.Stale != 2 || w.Lost != 1 || !w.StartedAt.Equal(started) ||
		w.HeartbeatInterval != time.Minute || !w.Live || time.Since(w.LastSeenAt) > time.Minute {
		t.Fatalf("Workers()[0] = %+v, want a's last report, live", w)
	}

	// b last reported one interval too long ago to be live: listed, not
	// live. c, one interval too long ago to be kept: deleted by the next
	// Register.
	for _, inst := range []queue.Instance{
		{ID: "b", Host: "h", PID: 1, StartedAt: started, Interval: time.Second},
		{ID: "c", Host: "h", PID: 2, StartedAt: started, Interval: time.Second},
	} {
		if err := c.Register(ctx, inst); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_workers SET last_seen_at = now() - $1 * interval '1 second' WHERE id = 'b'`, pgqueue.LiveIntervals+1); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_workers SET last_seen_at = now() - $1 * interval '1 second' WHERE id = 'c'`, pgqueue.GoneIntervals+1); err != nil {
		t.Fatal(err)
	}
	if err := c.Register(ctx, a); err != nil {
		t.Fatal(err)
	}
	ws, err = c.Workers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].ID != "a" || !ws[0].Live || ws[1].ID != "b" || ws[1].Live {
		t.Fatalf("Workers = %+v, want a live, b not live, c gone", ws)
	}

	if err := c.Deregister(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if ws, err = c.Workers(ctx); err != nil || len(ws) != 1 || ws[0].ID != "b" {
		t.Fatalf("after Deregister(a): %+v, %v; want only b", ws, err)
	}
}
