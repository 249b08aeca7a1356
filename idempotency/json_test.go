package idempotency_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/pgtest"
)

type chargeRequest struct {
	Amount   int    `json:"amount"`
	Currency string `json:"currency"`
}

type chargeResponse struct {
	ChargeID string `json:"charge_id"`
	Amount   int    `json:"amount"`
}

func TestDoJSON(t *testing.T) {
	ctx := testCtx(t)
	db := pgtest.New(t)
	s := idempotency.New(db.Pool, idempotency.Options{Scope: "json"})
	runs := 0
	fn := func(context.Context) (chargeResponse, error) {
		runs++
		return chargeResponse{ChargeID: "ch_1", Amount: 4200}, nil
	}
	req := chargeRequest{Amount: 4200, Currency: "EUR"}
	for range 2 {
		got, err := idempotency.DoJSON(ctx, s, "k", req, fn)
		if err != nil || got != (chargeResponse{ChargeID: "ch_1", Amount: 4200}) {
			t.Fatalf("%+v, %v", got, err)
		}
	}
	if runs != 1 {
		t.Fatalf("fn ran %d times", runs)
	}
	_, err := idempotency.DoJSON(ctx, s, "k", chargeRequest{Amount: 9900, Currency: "EUR"}, fn)
	if !errors.Is(err, idempotency.ErrKeyReused) {
		t.Fatalf("another amount under the same key: %v, want ErrKeyReused", err)
	}
	_, err = idempotency.DoJSON(ctx, s, "k2", func() {}, fn)
	if err == nil || !strings.HasPrefix(err.Error(), "idempotency: fingerprint: json: unsupported type") {
		t.Fatalf("unencodable request: %v", err)
	}
	// A stored response that does not decode into T is reported, not zeroed.
	_, err = idempotency.DoJSON(ctx, s, "k", req, func(context.Context) (int, error) { return 0, nil })
	if err == nil || !strings.HasPrefix(err.Error(), `idempotency: decode stored response of key "k": json: cannot unmarshal object`) {
		t.Fatalf("decoding into the wrong type: %v", err)
	}
}

func TestFingerprint(t *testing.T) {
	a, _ := idempotency.Fingerprint(map[string]int{"a": 1, "b": 2})
	b, _ := idempotency.Fingerprint(map[string]int{"b": 2, "a": 1})
	c, _ := idempotency.Fingerprint(map[string]int{"a": 1, "b": 3})
	if a != b || a == c || len(a) != 64 {
		t.Fatalf("fingerprints %s %s %s", a, b, c)
	}
}
