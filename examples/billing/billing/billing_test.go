package billing_test

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/examples/billing/billing"
	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
)

func TestMain(m *testing.M) { jobfencetest.Main(m) }

// provider records the calls it gets and refuses the first ones it is
// told to, as a provider over its rate does.
type provider struct {
	mu      sync.Mutex
	calls   []time.Time
	refuse  int
	wait    time.Duration
	refused int
}

func (p *provider) Send(ctx context.Context, customer, text string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, time.Now())
	if p.refused < p.refuse {
		p.refused++
		return &billing.RateLimitedError{RetryAfter: p.wait}
	}
	return nil
}

// newService is the service as it runs: one client, its handlers, its
// limits and schedule stored.
func newService(t *testing.T, p billing.Provider) (*jobfence.Client, *pgxpool.Pool) {
	t.Helper()
	db := jobfencetest.NewDB(t)
	reg := jobfence.NewRegistry()
	billing.Register(reg, db.Pool, p)
	client, err := jobfence.NewClient(db.Pool, jobfence.Config{Queues: billing.Queues, Handlers: reg})
	if err != nil {
		t.Fatal(err)
	}
	if err := billing.Setup(context.Background(), client, db.Pool); err != nil {
		t.Fatal(err)
	}
	return client, db.Pool
}

// start starts client for the test's length.
func start(t *testing.T, client *jobfence.Client) {
	t.Helper()
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := client.Stop(context.Background()); err != nil {
			t.Error(err)
		}
	})
}

func TestRefundOnlyWhenShippingFails(t *testing.T) {
	ctx := context.Background()
	client, pool := newService(t, &provider{})
	lost, err := billing.PlaceOrder(ctx, client, "lost", 500, "")
	if err != nil {
		t.Fatal(err)
	}
	shipped, err := billing.PlaceOrder(ctx, client, "shipped", 700, "1 Main St")
	if err != nil {
		t.Fatal(err)
	}
	jobfencetest.NewWorker(t, client).Drain(ctx, t, "orders")

	want := map[string]map[string]queue.State{
		"lost":    {"charge": queue.StateCompleted, "ship": queue.StateCancelled, "refund": queue.StateCompleted},
		"shipped": {"charge": queue.StateCompleted, "ship": queue.StateCompleted, "refund": queue.StateCancelled},
	}
	for order, res := range map[string]jobfence.WorkflowResult{"lost": lost, "shipped": shipped} {
		for task, st := range want[order] {
			j, err := client.Get(ctx, res.Tasks[task])
			if err != nil {
				t.Fatal(err)
			}
			if j.State != st {
				t.Errorf("order %s: %s is %s, want %s (errors %v)", order, task, j.State, st, j.Errors)
			}
		}
	}
	var refunded []string
	rows, err := pool.Query(ctx, `SELECT r.order_id FROM refunds r JOIN charges c USING (order_id, charge_id)`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var o string
		if err := rows.Scan(&o); err != nil {
			t.Fatal(err)
		}
		refunded = append(refunded, o)
	}
	if len(refunded) != 1 || refunded[0] != "lost" {
		t.Fatalf("refunded %v with their own charge IDs, want only [lost]", refunded)
	}
}

func TestInvoicesRunInTheOrderRaisedPerCustomer(t *testing.T) {
	ctx := context.Background()
	client, pool := newService(t, &provider{})
	start(t, client)
	var ids []int64
	for n := 1; n <= 6; n++ {
		for _, c := range []string{"acme", "globex"} {
			res, err := client.Insert(ctx, billing.Invoice{Customer: c, Number: n}, nil)
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, res.ID)
		}
	}
	jobfencetest.WaitFinal(ctx, t, client, ids...)
	for _, c := range []string{"acme", "globex"} {
		rows, err := pool.Query(ctx, `SELECT number FROM invoices WHERE customer = $1 ORDER BY at`, c)
		if err != nil {
			t.Fatal(err)
		}
		var got []int
		for rows.Next() {
			var n int
			if err := rows.Scan(&n); err != nil {
				t.Fatal(err)
			}
			got = append(got, n)
		}
		for i, n := range got {
			if n != i+1 {
				t.Fatalf("%s's invoices were raised in the order %v, want 1 to 6", c, got)
			}
		}
		if len(got) != 6 {
			t.Fatalf("%s has %d invoices, want 6", c, len(got))
		}
	}
}

func TestNotificationWaitsOutTheProvidersRetryAfter(t *testing.T) {
	ctx := context.Background()
	p := &provider{refuse: 1, wait: 300 * time.Millisecond}
	client, _ := newService(t, p)
	start(t, client)
	id, err := billing.Notify(ctx, client, "acme", "your invoice is ready")
	if err != nil {
		t.Fatal(err)
	}
	jobs := jobfencetest.WaitFinal(ctx, t, client, id)
	if j := jobs[0]; j.State != queue.StateCompleted || j.Attempt != 1 {
		t.Fatalf("notification %s after %d attempts, want completed after 1: a 429 spends no attempt", j.State, j.Attempt)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.calls) != 2 {
		t.Fatalf("provider called %d times, want 2 (refused, then sent)", len(p.calls))
	}
	if gap := p.calls[1].Sub(p.calls[0]); gap < p.wait {
		t.Fatalf("sent again %v after the 429, before its Retry-After of %v", gap, p.wait)
	}
}

func TestSummaryTriggeredFromAnInsertOnlyClient(t *testing.T) {
	ctx := context.Background()
	client, _ := newService(t, &provider{})
	// An API process: no queues, no handlers, and still the schedules.
	api, err := jobfence.NewClient(client.PGQueue().Pool(), jobfence.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Insert(ctx, billing.Invoice{Customer: "acme", Number: 1}, nil); err != nil {
		t.Fatal(err)
	}
	w := jobfencetest.NewWorker(t, client)
	w.Drain(ctx, t, "billing")
	if paused, err := api.Schedules().Pause(ctx, billing.SummarySchedule, "on-call"); err != nil || !paused {
		t.Fatalf("Pause = %v, %v; want it paused by this call", paused, err)
	}
	fire, err := api.Schedules().Trigger(ctx, billing.SummarySchedule) // runs while paused, as asked
	if err != nil {
		t.Fatal(err)
	}
	w.Drain(ctx, t, "billing")
	j, err := client.Get(ctx, fire.JobID)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]int
	if err := json.Unmarshal(j.Output, &out); err != nil || j.State != queue.StateCompleted || out["invoices"] != 1 {
		t.Fatalf("summary %s with output %s (%v), want completed counting 1 invoice", j.State, j.Output, err)
	}
}
