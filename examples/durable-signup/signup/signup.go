// Package signup is a signup and order service written with durable
// jobs (docs/durable.md) on one jobfence.Client. A signup creates a
// payment provider's customer, provisions a tenant and sends a welcome
// email, each a step recorded once under the job's fence, then sleeps two
// days without holding a worker and sends a follow-up. An order charges,
// then waits (up to a week, holding nothing) for the warehouse's webhook,
// a signal, and then tells the customer it shipped. The code that placed
// either can await its result over HTTP.
package signup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/jobfence/jobfence"
)

// Queues are the queues the service works, with each one's concurrency on
// an instance; size the pool with jobfence.PoolConfig(url, Queues).
var Queues = map[string]int{"signups": 4, "orders": 4}

// Signup signs up Email.
type Signup struct {
	Email string `json:"email"`
}

// Kind names the signup handler.
func (Signup) Kind() string { return "signup" }

// InsertOpts puts signups on the signups queue.
func (Signup) InsertOpts() jobfence.InsertOpts { return jobfence.InsertOpts{Queue: "signups"} }

// Account is a signup's result, recorded with its completion.
type Account struct {
	CustomerID string `json:"customer_id"`
	TenantID   string `json:"tenant_id"`
}

// Order charges Cents to Email for Order and ships it.
type Order struct {
	Order string `json:"order"`
	Email string `json:"email"`
	Cents int    `json:"cents"`
}

// Kind names the order handler.
func (Order) Kind() string { return "order" }

// InsertOpts puts orders on the orders queue.
func (Order) InsertOpts() jobfence.InsertOpts { return jobfence.InsertOpts{Queue: "orders"} }

// Shipment is the warehouse's "shipped" signal to an order.
type Shipment struct {
	Carrier  string `json:"carrier"`
	Tracking string `json:"tracking"`
}

// Shipped is an order's result, recorded with its completion.
type Shipped struct {
	ChargeID string `json:"charge_id"`
	Carrier  string `json:"carrier"`
	Tracking string `json:"tracking"`
}

// ShippedSignal names the signal the warehouse's webhook sends an order.
const ShippedSignal = "shipped"

// ErrNeverShipped is why an order whose warehouse sent nothing within
// Options.ShipWithin is cancelled.
var ErrNeverShipped = errors.New("signup: the warehouse did not ship the order in time")

// Provider is the outside world: a payment provider, a tenant
// provisioner, an email sender. Each call takes an idempotency key
// (jobfence.StepKey): a step run again after a crash, before its result
// was recorded, passes the same key, and the provider applies the call
// once, as Stripe does with its Idempotency-Key header.
type Provider interface {
	CreateCustomer(ctx context.Context, key, email string) (customerID string, err error)
	ProvisionTenant(ctx context.Context, key, customerID string) (tenantID string, err error)
	Charge(ctx context.Context, key, email string, cents int) (chargeID string, err error)
	SendEmail(ctx context.Context, key, to, template string) error
}

// Options tunes the service; the zero value is production's.
type Options struct {
	// FollowUpAfter is how long after the welcome email the follow-up is
	// sent; zero means two days. The demo shortens it.
	FollowUpAfter time.Duration
	// ShipWithin is how long an order waits for the warehouse's webhook
	// before it is cancelled; zero means a week.
	ShipWithin time.Duration
}

// Register adds the service's handlers to reg; their outside calls go to p.
func Register(reg *jobfence.Registry, p Provider, o Options) {
	if o.FollowUpAfter == 0 {
		o.FollowUpAfter = 48 * time.Hour
	}
	if o.ShipWithin == 0 {
		o.ShipWithin = 7 * 24 * time.Hour
	}
	// A plain handler (AddHandler), not AddHandlerTx: Sleep and
	// AwaitSignal end the attempt, which would roll a transaction back.
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[Signup]) error {
		email := job.Args.Email
		// Each step's result is recorded under the attempt's fence; an
		// attempt after a crash, a stop or the sleep below gets it back
		// without calling the provider again.
		customer, err := jobfence.Step(ctx, "stripe-customer", func(ctx context.Context) (string, error) {
			return p.CreateCustomer(ctx, jobfence.StepKey(ctx), email)
		})
		if err != nil {
			return err
		}
		tenant, err := jobfence.Step(ctx, "provision-tenant", func(ctx context.Context) (string, error) {
			return p.ProvisionTenant(ctx, jobfence.StepKey(ctx), customer)
		})
		if err != nil {
			return err
		}
		if _, err := jobfence.Step(ctx, "welcome-email", func(ctx context.Context) (bool, error) {
			return true, p.SendEmail(ctx, jobfence.StepKey(ctx), email, "welcome")
		}); err != nil {
			return err
		}
		// The first time here this returns an error wrapping
		// jobfence.ErrSuspended: the job goes back to the database for
		// two days, holding no worker, and runs again from the top, every
		// step above replayed, this Sleep returning nil.
		if err := jobfence.Sleep(ctx, o.FollowUpAfter); err != nil {
			return err
		}
		if _, err := jobfence.Step(ctx, "follow-up-email", func(ctx context.Context) (bool, error) {
			return true, p.SendEmail(ctx, jobfence.StepKey(ctx), email, "follow-up")
		}); err != nil {
			return err
		}
		return jobfence.RecordOutput(ctx, Account{CustomerID: customer, TenantID: tenant})
	})
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[Order]) error {
		charge, err := jobfence.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			return p.Charge(ctx, jobfence.StepKey(ctx), job.Args.Email, job.Args.Cents)
		})
		if err != nil {
			return err
		}
		// Suspends until the warehouse's webhook signals (Webhook), or
		// ShipWithin passes; a signal sent before the order got here is
		// kept for it.
		s, err := jobfence.AwaitSignal[Shipment](ctx, ShippedSignal, o.ShipWithin)
		if errors.Is(err, jobfence.ErrSignalTimeout) {
			// A real service would refund here, as a step of its own.
			return jobfence.JobCancel(fmt.Errorf("order %s: %w", job.Args.Order, ErrNeverShipped))
		}
		if err != nil {
			return err
		}
		if _, err := jobfence.Step(ctx, "ship-notification", func(ctx context.Context) (bool, error) {
			return true, p.SendEmail(ctx, jobfence.StepKey(ctx), job.Args.Email, "shipped "+s.Tracking)
		}); err != nil {
			return err
		}
		return jobfence.RecordOutput(ctx, Shipped{ChargeID: charge, Carrier: s.Carrier, Tracking: s.Tracking})
	})
}

// OrderKey is the unique key of order's job: the webhook, which knows the
// order's number and not the job's ID, signals the job by it.
func OrderKey(order string) string { return "order:" + order }

// StartSignup inserts email's signup, once: a second call for the same
// email returns the first's job.
func StartSignup(ctx context.Context, client *jobfence.Client, email string) (int64, error) {
	res, err := client.Insert(ctx, Signup{Email: email}, &jobfence.InsertOpts{UniqueKey: "signup:" + email})
	return res.ID, err
}

// PlaceOrder inserts order o's job, once per order number.
func PlaceOrder(ctx context.Context, client *jobfence.Client, o Order) (int64, error) {
	res, err := client.Insert(ctx, o, &jobfence.InsertOpts{UniqueKey: OrderKey(o.Order)})
	return res.ID, err
}

// maxWait bounds how long an HTTP caller may wait for a result.
const maxWait = time.Minute

// Handler serves the service's HTTP API:
//
//	POST /signups            {"email": ...}                        -> {"id": ...}
//	GET  /signups/{id}?wait=30s                                    -> the Account, once the signup ends
//	POST /orders             {"order": ..., "email": ..., "cents": ...} -> {"id": ...}
//	GET  /orders/{id}?wait=30s                                     -> the Shipped result
//	POST /webhooks/warehouse {"order": ..., "carrier": ..., "tracking": ...}
//
// A GET waits up to wait (at most a minute) for the job to end and
// answers 202 with its state if it has not.
func Handler(client *jobfence.Client) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /signups", func(w http.ResponseWriter, r *http.Request) {
		var s Signup
		if err := json.NewDecoder(r.Body).Decode(&s); err != nil || s.Email == "" {
			http.Error(w, "want {\"email\": ...}", http.StatusBadRequest)
			return
		}
		id, err := StartSignup(r.Context(), client, s.Email)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		reply(w, http.StatusAccepted, map[string]int64{"id": id})
	})
	mux.HandleFunc("GET /signups/{id}", func(w http.ResponseWriter, r *http.Request) {
		awaitResult[Account](w, r, client)
	})
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		var o Order
		if err := json.NewDecoder(r.Body).Decode(&o); err != nil || o.Order == "" || o.Email == "" {
			http.Error(w, "want {\"order\": ..., \"email\": ..., \"cents\": ...}", http.StatusBadRequest)
			return
		}
		id, err := PlaceOrder(r.Context(), client, o)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		reply(w, http.StatusAccepted, map[string]int64{"id": id})
	})
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		awaitResult[Shipped](w, r, client)
	})
	mux.HandleFunc("POST /webhooks/warehouse", func(w http.ResponseWriter, r *http.Request) {
		// A real webhook verifies the warehouse's signature first.
		var in struct {
			Order string `json:"order"`
			Shipment
		}
		if err := json.NewDecoder(r.Body).Decode(&in); err != nil || in.Order == "" {
			http.Error(w, "want {\"order\": ..., \"carrier\": ..., \"tracking\": ...}", http.StatusBadRequest)
			return
		}
		id, err := client.SignalByKey(r.Context(), OrderKey(in.Order), ShippedSignal, in.Shipment)
		switch {
		case errors.Is(err, jobfence.ErrJobNotFound):
			http.Error(w, "no open order "+in.Order, http.StatusNotFound)
		case errors.Is(err, jobfence.ErrJobFinished):
			http.Error(w, "order "+in.Order+" has ended", http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			reply(w, http.StatusAccepted, map[string]int64{"id": id})
		}
	})
	return mux
}

// awaitResult answers with the result of the job the path names, waiting
// for it as the query's wait asks.
func awaitResult[T any](w http.ResponseWriter, r *http.Request, client *jobfence.Client) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil {
		http.Error(w, "bad job ID", http.StatusBadRequest)
		return
	}
	wait := 30 * time.Second
	if s := r.URL.Query().Get("wait"); s != "" {
		if wait, err = time.ParseDuration(s); err != nil || wait <= 0 {
			http.Error(w, "wait: want a positive duration such as 10s", http.StatusBadRequest)
			return
		}
	}
	ctx, cancel := context.WithTimeout(r.Context(), min(wait, maxWait))
	defer cancel()
	v, err := jobfence.Result[T](ctx, client, id)
	var failed *jobfence.JobFailedError
	switch {
	case err == nil:
		reply(w, http.StatusOK, v)
	case errors.As(err, &failed):
		reply(w, http.StatusConflict, map[string]string{"state": string(failed.State), "error": failed.LastError})
	case errors.Is(err, jobfence.ErrJobNotFound):
		http.Error(w, "no such job", http.StatusNotFound)
	case errors.Is(err, context.DeadlineExceeded) && r.Context().Err() == nil:
		// Not ended yet: say where it is.
		j, gerr := client.Get(r.Context(), id)
		if gerr != nil {
			http.Error(w, gerr.Error(), http.StatusInternalServerError)
			return
		}
		reply(w, http.StatusAccepted, map[string]string{"state": string(j.State)})
	default:
		http.Error(w, err.Error(), http.StatusInternalServerError)
	}
}

func reply(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v) // the client went away: nothing to do
}
