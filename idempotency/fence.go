package idempotency

import (
	"context"

	"github.com/jackc/pgx/v5/pgconn"
)

type fenceKey struct{}

func withFence(ctx context.Context, fence int64) context.Context {
	return context.WithValue(ctx, fenceKey{}, fence)
}

// FenceFrom returns the fence under which the function passed to Do or DoTx
// holds its key, and whether ctx carries one. Use it to fence the
// function's own writes (see Fenced) so that they fail once a newer owner has
// taken the key over.
//
// The fence is the key's, not a job's: inside a job handler, job.Fence is
// the job claim's fence, and FenceFrom(ctx) is the fence of the key taken by
// Do or DoTx. Both come from the same sequence.
func FenceFrom(ctx context.Context) (int64, bool) {
	f, ok := ctx.Value(fenceKey{}).(int64)
	return f, ok
}

// Fenced turns the outcome of a conditional write into an error: it returns
// err when the statement failed, ErrStaleFence when it changed no row, and
// nil otherwise. Pass it an Exec's results directly:
//
//	err := idempotency.Fenced(tx.Exec(ctx,
//		`UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2`,
//		balance, job.Fence, id))
//	if errors.Is(err, idempotency.ErrStaleFence) {
//		// a newer owner has written this row; this write changed nothing
//	}
//
// The write must be conditional on the fence (WHERE ... fence <= $fence, or
// WHERE id = $job AND fence = $fence for a row that records its owner), or
// a zero row count means something else.
func Fenced(tag pgconn.CommandTag, err error) error {
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return ErrStaleFence
	}
	return nil
}
