package signup

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// ErrNoIdempotencyKey is a FakeProvider's refusal of a call without an
// idempotency key: such a call could take effect twice.
var ErrNoIdempotencyKey = errors.New("signup: an outside call without an idempotency key")

// Call is one call a FakeProvider got.
type Call struct {
	// Op is the call: "customer", "tenant", "charge" or "email:TEMPLATE".
	Op string
	// Key is the call's idempotency key.
	Key string
	// At is when it came.
	At time.Time
	// Effect reports that the call took effect: false for a call that
	// repeated an earlier one's key, which got the earlier one's result.
	Effect bool
}

// FakeProvider stands in for the payment provider, the provisioner and
// the email sender: it applies each idempotency key's call once, returning
// the first call's result to a repeat, as the real ones do, and records
// every call, so that a test can tell calls from effects. Its zero value
// is ready; Log, if set, logs each effect.
type FakeProvider struct {
	Log *slog.Logger

	mu      sync.Mutex
	calls   []Call
	results map[string]string
	n       int
}

var _ Provider = (*FakeProvider)(nil)

// call applies op under key once, making its result with mk.
func (f *FakeProvider) call(op, key string, mk func(n int) string) (string, error) {
	if key == "" {
		return "", fmt.Errorf("%s: %w", op, ErrNoIdempotencyKey)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.results == nil {
		f.results = map[string]string{}
	}
	res, seen := f.results[key]
	f.calls = append(f.calls, Call{Op: op, Key: key, At: time.Now(), Effect: !seen})
	if seen {
		return res, nil
	}
	f.n++
	res = mk(f.n)
	f.results[key] = res
	if f.Log != nil {
		f.Log.Info("provider: "+op, "key", key, "result", res)
	}
	return res, nil
}

// CreateCustomer creates a customer for email.
func (f *FakeProvider) CreateCustomer(ctx context.Context, key, email string) (string, error) {
	return f.call("customer", key, func(n int) string { return fmt.Sprintf("cus_%d", n) })
}

// ProvisionTenant provisions a tenant for customerID.
func (f *FakeProvider) ProvisionTenant(ctx context.Context, key, customerID string) (string, error) {
	return f.call("tenant", key, func(n int) string { return fmt.Sprintf("tenant_%d", n) })
}

// Charge charges cents to email.
func (f *FakeProvider) Charge(ctx context.Context, key, email string, cents int) (string, error) {
	return f.call("charge", key, func(n int) string { return fmt.Sprintf("ch_%d", n) })
}

// SendEmail sends template to to.
func (f *FakeProvider) SendEmail(ctx context.Context, key, to, template string) error {
	_, err := f.call("email:"+template, key, func(n int) string { return to })
	return err
}

// Calls returns the calls of op so far, in the order they came.
func (f *FakeProvider) Calls(op string) []Call {
	f.mu.Lock()
	defer f.mu.Unlock()
	var cs []Call
	for _, c := range f.calls {
		if c.Op == op {
			cs = append(cs, c)
		}
	}
	return cs
}

// Effects counts the calls of op that took effect.
func (f *FakeProvider) Effects(op string) int {
	n := 0
	for _, c := range f.Calls(op) {
		if c.Effect {
			n++
		}
	}
	return n
}
