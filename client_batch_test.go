package jobfence_test

import (
	"context"
	"testing"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/workflow"
)

// TestClientInsertBatch: a client inserts a batch, in its own
// transaction or the caller's (gone with a rollback), and refuses a
// batch it cannot insert, saying why.
func TestClientInsertBatch(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	c := newClient(t, db.Pool, jobfence.Config{})

	_, err := c.InsertBatch(ctx, nil)
	wantErr(t, "InsertBatch(nil)", err, nil, "jobfence: insert batch: workflow: insert batch: nil batch")
	_, err = c.InsertBatch(ctx, workflow.NewBatch("no callback").Add(greet{}, nil))
	wantErr(t, "InsertBatch without a callback", err, workflow.ErrInvalid, "it has no callback; set one with OnComplete")

	res, err := c.InsertBatch(ctx, workflow.NewBatch("greetings").Add(greet{Name: "a"}, nil).Add(greet{Name: "b"}, nil).OnComplete(greet{Name: "done"}, nil))
	if err != nil || res.ID == "" || len(res.Members) != 2 || res.Callback == 0 {
		t.Fatalf("InsertBatch: %+v, %v", res, err)
	}
	info, err := c.Workflows().Get(ctx, res.ID)
	if err != nil || info.Total() != 3 || info.Counts[queue.StateAvailable] != 2 || info.Counts[queue.StatePending] != 1 {
		t.Fatalf("the batch's workflow: %+v, %v; want 2 members available, the callback pending", info, err)
	}

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gone, err := c.InsertBatchTx(ctx, tx, workflow.NewBatch("rolled back").Add(greet{}, nil).OnComplete(greet{}, nil))
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Workflows().Get(ctx, gone.ID); err == nil {
		t.Fatalf("a batch inserted in a rolled-back transaction exists: %s", gone.ID)
	}
}
