package signup_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/examples/durable-signup/signup"
	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
)

func TestMain(m *testing.M) { jobfencetest.Main(m) }

// wait bounds every wait of these tests.
const wait = 30 * time.Second

// newClient is an instance of the service on pool: its handlers calling
// p, a client on its queues.
func newClient(t *testing.T, pool *pgxpool.Pool, p signup.Provider, o signup.Options) *jobfence.Client {
	t.Helper()
	reg := jobfence.NewRegistry()
	signup.Register(reg, p, o)
	client, err := jobfence.NewClient(pool, jobfence.Config{Queues: signup.Queues, Handlers: reg})
	if err != nil {
		t.Fatal(err)
	}
	return client
}

// start starts client, stopping it when the test ends unless the test
// stopped it itself.
func start(t *testing.T, client *jobfence.Client) {
	t.Helper()
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Stop(context.Background()) }) // ErrNotStarted once stopped
}

// stopInTenant is the provider a worker is stopped in: its first
// ProvisionTenant takes effect and then hangs until the handler's context
// ends (the worker stops), so the step's result is never recorded, as
// when a worker dies between an outside call and its record.
type stopInTenant struct {
	*signup.FakeProvider
	once    sync.Once
	entered chan struct{}
}

func (p *stopInTenant) ProvisionTenant(ctx context.Context, key, customerID string) (string, error) {
	id, err := p.FakeProvider.ProvisionTenant(ctx, key, customerID)
	hang := false
	p.once.Do(func() { hang = true })
	if !hang || err != nil {
		return id, err
	}
	close(p.entered)
	<-ctx.Done()
	return "", ctx.Err()
}

// TestSignupResumesOnAnotherClientWithEachEffectOnce: a worker stopped
// (Client.Stop) inside the second step, after its outside call and before
// its record, puts the signup back; a new client resumes it. The first
// step is replayed, not called again; the second runs again with the
// same idempotency key, so the provider applies it once; the welcome
// email goes once, the follow-up once, after the durable sleep; Result
// returns the recorded account.
func TestSignupResumesOnAnotherClientWithEachEffectOnce(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	fake := &signup.FakeProvider{}
	p := &stopInTenant{FakeProvider: fake, entered: make(chan struct{})}
	const followUp = 500 * time.Millisecond
	first := newClient(t, db.Pool, p, signup.Options{FollowUpAfter: followUp})
	start(t, first)
	id, err := signup.StartSignup(ctx, first, "ann@example.com")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.entered:
	case <-time.After(wait):
		t.Fatalf("the signup did not reach provision-tenant within %s", wait)
	}
	stopNow, cancel := context.WithCancel(ctx)
	cancel() // interrupt the running handler at once
	if err := first.Stop(stopNow); err != nil {
		t.Logf("stop: %v", err) // "running jobs were interrupted and put back"
	}
	j, err := first.Get(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if j.State.Final() {
		t.Fatalf("the signup is %s after the stop, want it put back unfinished", j.State)
	}

	second := newClient(t, db.Pool, p, signup.Options{FollowUpAfter: followUp})
	start(t, second)
	waitCtx, cancelWait := context.WithTimeout(ctx, wait)
	defer cancelWait()
	acct, err := jobfence.Result[signup.Account](waitCtx, second, id)
	if err != nil {
		t.Fatal(err)
	}

	customers, tenants := fake.Calls("customer"), fake.Calls("tenant")
	if len(customers) != 1 {
		t.Errorf("stripe-customer called %d times, want once: the resumed attempt replays its record", len(customers))
	}
	if len(tenants) != 2 || tenants[0].Key != tenants[1].Key {
		t.Errorf("provision-tenant calls %+v, want two with one idempotency key (before and after the stop)", tenants)
	}
	for _, op := range []string{"customer", "tenant", "email:welcome", "email:follow-up"} {
		if n := fake.Effects(op); n != 1 {
			t.Errorf("%s took effect %d times, want once", op, n)
		}
	}
	if len(customers) > 0 && len(tenants) > 0 {
		want := signup.Account{CustomerID: "cus_1", TenantID: "tenant_2"}
		if acct != want {
			t.Errorf("Result = %+v, want %+v (the provider's first results)", acct, want)
		}
	}
	welcome, followed := fake.Calls("email:welcome"), fake.Calls("email:follow-up")
	if len(welcome) == 1 && len(followed) == 1 {
		if gap := followed[0].At.Sub(welcome[0].At); gap < followUp {
			t.Errorf("follow-up sent %v after the welcome, before the sleep's %v", gap, followUp)
		}
	}
	if j, err := second.Get(ctx, id); err != nil || j.State != queue.StateCompleted {
		t.Fatalf("signup: %v, %v; want completed", j, err)
	}
	if st := second.Worker().Stats(); st.Suspended != 1 || st.StepsReplayed < 2 {
		t.Errorf("the resuming worker's stats: suspended %d, replayed %d; want the sleep and the replays on it", st.Suspended, st.StepsReplayed)
	}
}

// api calls the service's HTTP API at base, decoding a JSON answer into
// out, and returns the status code.
func api(t *testing.T, method, url string, in, out any) int {
	t.Helper()
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait+10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %s: %v", method, url, b, err)
		}
	}
	return resp.StatusCode
}

// TestWarehouseWebhookWakesTheOrder: an order charges and suspends
// awaiting the warehouse, holding no worker; the webhook's POST signals it
// by the order's number, the order resumes (the charge replayed, not
// made again) and sends its notification; the caller awaiting it over
// HTTP gets the recorded result. A webhook for no open order is a 404.
func TestWarehouseWebhookWakesTheOrder(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	fake := &signup.FakeProvider{}
	client := newClient(t, db.Pool, fake, signup.Options{})
	start(t, client)
	srv := httptest.NewServer(signup.Handler(client))
	defer srv.Close()

	var placed struct{ ID int64 }
	order := signup.Order{Order: "A-1", Email: "ann@example.com", Cents: 1999}
	if code := api(t, "POST", srv.URL+"/orders", order, &placed); code != http.StatusAccepted {
		t.Fatalf("POST /orders: %d", code)
	}
	// Suspended: scheduled, its wait recorded, the charge made.
	deadline := time.Now().Add(wait)
	for {
		j, err := client.Get(ctx, placed.ID)
		if err != nil {
			t.Fatal(err)
		}
		if j.State == queue.StateScheduled && len(fake.Calls("charge")) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("order is %s with %d charges after %s, want it suspended after one", j.State, len(fake.Calls("charge")), wait)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var pending map[string]string
	if code := api(t, "GET", fmt.Sprintf("%s/orders/%d?wait=100ms", srv.URL, placed.ID), nil, &pending); code != http.StatusAccepted || pending["state"] != "scheduled" {
		t.Fatalf("GET the order while it waits: %d %v, want 202 scheduled", code, pending)
	}
	if n := len(fake.Calls("email:shipped 1Z999")); n != 0 {
		t.Fatalf("notified %d times before the warehouse shipped", n)
	}

	hook := map[string]string{"order": "A-1", "carrier": "ups", "tracking": "1Z999"}
	var signalled struct{ ID int64 }
	if code := api(t, "POST", srv.URL+"/webhooks/warehouse", hook, &signalled); code != http.StatusAccepted || signalled.ID != placed.ID {
		t.Fatalf("webhook: %d, job %d; want 202 for job %d", code, signalled.ID, placed.ID)
	}
	var shipped signup.Shipped
	if code := api(t, "GET", fmt.Sprintf("%s/orders/%d?wait=%s", srv.URL, placed.ID, wait), nil, &shipped); code != http.StatusOK {
		t.Fatalf("GET the order's result: %d", code)
	}
	if want := (signup.Shipped{ChargeID: "ch_1", Carrier: "ups", Tracking: "1Z999"}); shipped != want {
		t.Errorf("result %+v, want %+v", shipped, want)
	}
	if n, m := len(fake.Calls("charge")), fake.Effects("email:shipped 1Z999"); n != 1 || m != 1 {
		t.Errorf("charged %d times and notified %d, want once each", n, m)
	}
	hook["order"] = "B-2"
	if code := api(t, "POST", srv.URL+"/webhooks/warehouse", hook, nil); code != http.StatusNotFound {
		t.Errorf("webhook for no open order: %d, want 404", code)
	}
}

// TestSignupOverHTTP: a caller signs up and awaits the account over HTTP;
// signing up the same email again returns the same job.
func TestSignupOverHTTP(t *testing.T) {
	db := jobfencetest.NewDB(t)
	fake := &signup.FakeProvider{}
	client := newClient(t, db.Pool, fake, signup.Options{FollowUpAfter: 100 * time.Millisecond})
	start(t, client)
	srv := httptest.NewServer(signup.Handler(client))
	defer srv.Close()
	var a, b struct{ ID int64 }
	for _, out := range []any{&a, &b} {
		if code := api(t, "POST", srv.URL+"/signups", map[string]string{"email": "bo@example.com"}, out); code != http.StatusAccepted {
			t.Fatalf("POST /signups: %d", code)
		}
	}
	if a.ID != b.ID {
		t.Fatalf("the same email signed up as jobs %d and %d, want one", a.ID, b.ID)
	}
	var acct signup.Account
	if code := api(t, "GET", fmt.Sprintf("%s/signups/%d?wait=%s", srv.URL, a.ID, wait), nil, &acct); code != http.StatusOK {
		t.Fatalf("GET the signup's result: %d", code)
	}
	if acct.CustomerID != "cus_1" || acct.TenantID != "tenant_2" || fake.Effects("email:follow-up") != 1 {
		t.Errorf("account %+v, %d follow-ups; want cus_1, tenant_2 and one", acct, fake.Effects("email:follow-up"))
	}
	if code := api(t, "GET", srv.URL+"/signups/999999?wait=1s", nil, nil); code != http.StatusNotFound {
		t.Errorf("GET an unknown job: %d, want 404", code)
	}
}
