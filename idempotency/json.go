package idempotency

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Fingerprint returns a fingerprint of request: the hex SHA-256 of its JSON
// encoding. Two requests with equal JSON have equal fingerprints (map keys
// are sorted by encoding/json; struct fields keep their declared order).
func Fingerprint(request any) (string, error) {
	b, err := json.Marshal(request)
	if err != nil {
		return "", fmt.Errorf("idempotency: fingerprint: %w", err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:]), nil
}

// DoJSON is Do with typed values: the fingerprint is Fingerprint(request),
// and fn's result is stored as JSON and decoded for retries.
func DoJSON[T any](ctx context.Context, s *Store, key string, request any, fn func(ctx context.Context) (T, error)) (T, error) {
	var zero T
	fp, err := Fingerprint(request)
	if err != nil {
		return zero, err
	}
	if fn == nil {
		return zero, fmt.Errorf("jobfence: idempotency: DoJSON: fn is nil")
	}
	b, err := s.Do(ctx, key, fp, func(ctx context.Context) ([]byte, error) {
		v, err := fn(ctx)
		if err != nil {
			return nil, err
		}
		return marshalResponse(v)
	})
	if err != nil {
		return zero, err
	}
	return unmarshalResponse[T](key, b)
}

// DoTxJSON is DoTx with typed values, as DoJSON is to Do.
func DoTxJSON[T any](ctx context.Context, s *Store, tx pgx.Tx, key string, request any, fn func(ctx context.Context, tx pgx.Tx) (T, error)) (T, error) {
	var zero T
	fp, err := Fingerprint(request)
	if err != nil {
		return zero, err
	}
	if fn == nil {
		return zero, fmt.Errorf("jobfence: idempotency: DoTxJSON: fn is nil")
	}
	b, err := s.DoTx(ctx, tx, key, fp, func(ctx context.Context, tx pgx.Tx) ([]byte, error) {
		v, err := fn(ctx, tx)
		if err != nil {
			return nil, err
		}
		return marshalResponse(v)
	})
	if err != nil {
		return zero, err
	}
	return unmarshalResponse[T](key, b)
}

func marshalResponse(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("idempotency: encode response: %w", err)
	}
	return b, nil
}

func unmarshalResponse[T any](key string, b []byte) (T, error) {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("idempotency: decode stored response of key %q: %w", key, err)
	}
	return v, nil
}
