package dashboard_test

import (
	"context"
	"regexp"
	"testing"
	"time"

	"github.com/jobfence/jobfence/dashboard"
	"github.com/jobfence/jobfence/queue"
)

// TestMetrics: /metrics has the fleet-wide series, read from the database.
func TestMetrics(t *testing.T) {
	d := newDash(t, dashboard.Options{})
	ctx := context.Background()
	for range 2 {
		d.enqueue(queue.EnqueueParams{Kind: "mail", Queue: "email"})
	}
	d.discardedJob("billing")
	d.finish(d.claim("email", 1)[0], queue.OutcomeComplete, nil)
	if err := d.q.PauseQueue(ctx, "billing", "ops"); err != nil {
		t.Fatal(err)
	}
	for i, seen := range []time.Duration{0, time.Hour} {
		if err := d.q.Register(ctx, queue.Instance{ID: []string{"w1", "w2"}[i], Host: "h", PID: 1, Queues: []string{"email"},
			Stale: 2, StartedAt: time.Now(), Interval: time.Second}); err != nil {
			t.Fatal(err)
		}
		if _, err := d.db.Pool.Exec(ctx, `UPDATE jobfence_workers SET last_seen_at = now() - $1::interval WHERE id = $2`, seen.String(), []string{"w1", "w2"}[i]); err != nil {
			t.Fatal(err)
		}
	}
	code, body := d.get("/metrics")
	if code != 200 {
		t.Fatalf("GET /metrics = %d", code)
	}
	for _, re := range []string{
		`(?m)^# TYPE jobfence_queue_jobs gauge$`,
		`(?m)^jobfence_queue_jobs\{queue="email",state="available"\} 1$`,
		`(?m)^jobfence_queue_jobs\{queue="email",state="running"\} 0$`,
		`(?m)^jobfence_queue_jobs\{queue="billing",state="discarded"\} 1$`,
		`(?m)^jobfence_queue_completed\{queue="email",window="5m"\} 1$`,
		`(?m)^jobfence_queue_completed\{queue="email",window="1h"\} 1$`,
		`(?m)^jobfence_queue_oldest_waiting_age_seconds\{queue="email"\} [0-9.e-]+$`,
		`(?m)^jobfence_queue_paused\{queue="billing"\} 1$`,
		`(?m)^jobfence_queue_paused\{queue="email"\} 0$`,
		`(?m)^jobfence_workers_live 1$`,
		`(?m)^jobfence_workers_stale_outcomes 4$`,
	} {
		if !regexp.MustCompile(re).MatchString(body) {
			t.Errorf("/metrics has no line matching %s:\n%s", re, body)
		}
	}
}
