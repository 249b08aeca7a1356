package idempotency_test

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/idempotency"
	"github.com/jobfence/jobfence/internal/pgtest"
)

// BenchmarkDo measures Do on new keys (claim, fn, complete) and on a
// completed key (replay), from 4 goroutines per core.
func BenchmarkDo(b *testing.B) {
	db := pgtest.New(b)
	s := idempotency.New(db.Pool, idempotency.Options{Heartbeat: -1})
	fn := func(context.Context) ([]byte, error) { return []byte(`{"ok":true}`), nil }
	ctx := context.Background()
	b.Run("new-key", func(b *testing.B) {
		b.SetParallelism(4)
		var id atomicCounter
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Do(ctx, "new-"+strconv.FormatInt(id.next(), 10), "fp", fn); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
	if _, err := s.Do(ctx, "replayed", "fp", fn); err != nil {
		b.Fatal(err)
	}
	b.Run("replay", func(b *testing.B) {
		b.SetParallelism(4)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if _, err := s.Do(ctx, "replayed", "fp", fn); err != nil {
					b.Error(err)
					return
				}
			}
		})
	})
}

// BenchmarkDoTx measures DoTx on new keys, each in its own transaction.
func BenchmarkDoTx(b *testing.B) {
	db := pgtest.New(b)
	s := idempotency.New(db.Pool, idempotency.Options{})
	fn := func(context.Context, pgx.Tx) ([]byte, error) { return []byte(`{"ok":true}`), nil }
	ctx := context.Background()
	b.SetParallelism(4)
	var id atomicCounter
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
				_, err := s.DoTx(ctx, tx, "tx-"+strconv.FormatInt(id.next(), 10), "fp", fn)
				return err
			})
			if err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkResultPut measures fenced upserts of results over 1,000 keys.
func BenchmarkResultPut(b *testing.B) {
	db := pgtest.New(b)
	rs := idempotency.NewResultStore(db.Pool, "bench")
	ctx := context.Background()
	b.SetParallelism(4)
	var id atomicCounter
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n := id.next()
			// Racing writers of one key: the smaller fence may lose, as it should.
			err := rs.Put(ctx, "r-"+strconv.FormatInt(n%1000, 10), n, []byte("v"))
			if err != nil && !errors.Is(err, idempotency.ErrStaleFence) {
				b.Error(err)
				return
			}
		}
	})
}
