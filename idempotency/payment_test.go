package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/pgtest"
)

// TestPaymentRetriedAfterTimeout: a client's first charge request is still
// running when the client times out and retries; it retries once more after
// the first finished. One charge is made and every caller gets the same
// response. With WaitForInProgress the retry waits for the first attempt's
// response; without it the retry is told the charge is in progress.
func TestPaymentRetriedAfterTimeout(t *testing.T) {
	tests := []struct {
		name string
		wait bool
	}{
		{"retry waits", true},
		{"retry told in progress", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := testCtx(t)
			db := pgtest.New(t)
			if _, err := db.Pool.Exec(ctx, chargesSQL); err != nil {
				t.Fatal(err)
			}
			rec := newLogRecorder()
			payments := idempotency.New(db.Pool, idempotency.Options{
				Scope: "payments", WaitForInProgress: tt.wait, PollInterval: 20 * time.Millisecond, Logger: rec.Logger(),
			})
			const key = "order-42-attempt"
			fp, err := idempotency.Fingerprint(map[string]any{"amount": 4200, "currency": "EUR"})
			if err != nil {
				t.Fatal(err)
			}
			charging := make(chan struct{})
			provider := make(chan struct{}) // the slow payment provider answers when closed
			chargeFn := func(ctx context.Context) ([]byte, error) {
				fence, _ := idempotency.FenceFrom(ctx)
				var id int64
				if err := db.Pool.QueryRow(ctx, "INSERT INTO charges (key, fence) VALUES ($1, $2) RETURNING id", key, fence).Scan(&id); err != nil {
					return nil, err
				}
				close(charging)
				<-provider
				return []byte(`{"charge":"ch_` + time.Now().Format("150405.000000") + `"}`), nil
			}

			type answer struct {
				resp []byte
				err  error
			}
			first := make(chan answer, 1)
			go func() {
				resp, err := payments.Do(ctx, key, fp, chargeFn)
				first <- answer{resp, err}
			}()
			<-charging // the client has timed out by now and retries

			retry := make(chan answer, 1)
			go func() {
				resp, err := payments.Do(ctx, key, fp, func(context.Context) ([]byte, error) {
					return nil, errors.New("the retry charged again")
				})
				retry <- answer{resp, err}
			}()
			var retried answer
			if tt.wait {
				rec.waitFor(t, msgWaiting, 1)
			} else {
				retried = <-retry
				if !errors.Is(retried.err, idempotency.ErrInProgress) {
					t.Fatalf("retry while in progress: %q, %v; want ErrInProgress", retried.resp, retried.err)
				}
			}
			close(provider)
			a := <-first
			if a.err != nil {
				t.Fatal(a.err)
			}
			if tt.wait {
				retried = <-retry
				if retried.err != nil || string(retried.resp) != string(a.resp) {
					t.Fatalf("waiting retry: %q, %v; want %q", retried.resp, retried.err, a.resp)
				}
			}
			late, err := payments.Do(ctx, key, fp, func(context.Context) ([]byte, error) {
				return nil, errors.New("the late retry charged again")
			})
			if err != nil || string(late) != string(a.resp) {
				t.Fatalf("retry after completion: %q, %v; want %q", late, err, a.resp)
			}
			if n := countRows(t, ctx, db.Pool, "charges"); n != 1 {
				t.Fatalf("%d charges, want 1", n)
			}
		})
	}
}
