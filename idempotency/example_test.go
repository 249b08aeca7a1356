package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/idempotency"
)

// A charge endpoint that honours the client's Idempotency-Key header: a
// retried request gets the first response and charges once.
func ExampleStore_Do() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	charges := idempotency.New(pool, idempotency.Options{Scope: "charges", WaitForInProgress: true})

	http.HandleFunc("POST /charges", func(w http.ResponseWriter, r *http.Request) {
		fp, _ := idempotency.Fingerprint(r.URL.Query())
		resp, err := charges.Do(r.Context(), r.Header.Get("Idempotency-Key"), fp, func(ctx context.Context) ([]byte, error) {
			// Call the payment provider here, passing the same key on.
			return []byte(`{"charge":"ch_123"}`), nil
		})
		switch {
		case errors.Is(err, idempotency.ErrKeyReused):
			http.Error(w, err.Error(), http.StatusUnprocessableEntity)
		case errors.Is(err, idempotency.ErrInProgress):
			http.Error(w, err.Error(), http.StatusConflict)
		case err != nil:
			http.Error(w, err.Error(), http.StatusInternalServerError)
		default:
			w.Write(resp)
		}
	})
}

// Selling the last unit: the key, the conditional write and the stored
// answer commit together, so neither a retry nor a race oversells.
func ExampleDoTxJSON() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	shop := idempotency.New(pool, idempotency.Options{Scope: "shop"})

	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		sold, err := idempotency.DoTxJSON(ctx, shop, tx, "buyer-7:order-1", map[string]string{"sku": "lamp"},
			func(ctx context.Context, tx pgx.Tx) (bool, error) {
				tag, err := tx.Exec(ctx, "UPDATE inventory SET qty = qty - 1 WHERE sku = 'lamp' AND qty > 0")
				return tag.RowsAffected() == 1, err
			})
		fmt.Println("sold:", sold)
		return err
	})
	if err != nil {
		panic(err)
	}
}

// A job's result written under the job's fence: a worker that lost the job
// (paused past its lease while another worker took over) cannot overwrite
// the newer result.
func ExampleResultStore_Put() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	results := idempotency.NewResultStore(pool, "reports")

	var jobKey string  // job.IdempotencyKey()
	var jobFence int64 // job.Fence
	err = results.Put(ctx, jobKey, jobFence, []byte(`{"rows":42}`))
	if errors.Is(err, idempotency.ErrStaleFence) {
		return // a newer owner has written this result; drop ours
	}
}
