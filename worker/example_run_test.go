package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// Example_insertAndRun inserts jobs, one in a transaction that commits and
// one in a transaction that rolls back, and runs what exists. RunOne runs
// one job through the worker's own path, as a started worker would; a
// service calls Start instead (see Example).
func Example_insertAndRun() {
	ctx := context.Background()
	db, err := jobfencetest.OpenDB(ctx, os.Getenv("DATABASE_URL")) // a migrated schema; in a service, your pool
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	jobs := pgqueue.New(db.Pool, pgqueue.Config{})

	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[SendInvoice]) error {
		fmt.Println("sending invoice", job.Args.InvoiceID)
		return nil
	})
	w, err := worker.New(jobs, reg, worker.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}

	if _, err := jobs.Insert(ctx, SendInvoice{InvoiceID: 1}, nil); err != nil {
		fmt.Println(err)
		return
	}
	// The job exists only if the transaction commits.
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		_, err := jobs.InsertTx(ctx, tx, SendInvoice{InvoiceID: 2}, nil)
		return err
	}); err != nil {
		fmt.Println(err)
		return
	}
	if err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		if _, err := jobs.InsertTx(ctx, tx, SendInvoice{InvoiceID: 3}, nil); err != nil {
			return err
		}
		return errors.New("the signup failed") // rolls back: no invoice 3
	}); err == nil {
		fmt.Println("committed?")
	}

	for {
		ran, err := w.RunOne(ctx, "default")
		if errors.Is(err, worker.ErrNoJob) {
			break
		}
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("outcome:", ran.Outcome)
	}
	// Output:
	// sending invoice 1
	// outcome: complete
	// sending invoice 2
	// outcome: complete
}

// ExampleAddTx_rollback shows a transactional handler's writes committing
// with the job's completion, and rolled back with its failure.
func ExampleAddTx_rollback() {
	ctx := context.Background()
	db, err := jobfencetest.OpenDB(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE invoices (id bigint PRIMARY KEY, sent_at timestamptz);
		INSERT INTO invoices (id) VALUES (1), (2)`); err != nil {
		fmt.Println(err)
		return
	}
	jobs := pgqueue.New(db.Pool, pgqueue.Config{})

	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[SendInvoice]) error {
		if _, err := tx.Exec(ctx, `UPDATE invoices SET sent_at = now() WHERE id = $1`, job.Args.InvoiceID); err != nil {
			return err
		}
		if job.Args.InvoiceID == 2 {
			return errors.New("the mail template is missing") // the UPDATE rolls back with it
		}
		return nil
	})
	w, err := worker.New(jobs, reg, worker.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, id := range []int64{1, 2} {
		if _, err := jobs.Insert(ctx, SendInvoice{InvoiceID: id}, nil); err != nil {
			fmt.Println(err)
			return
		}
		ran, err := w.RunOne(ctx, "default")
		if err != nil {
			fmt.Println(err)
			return
		}
		var sent bool
		if err := db.Pool.QueryRow(ctx, `SELECT sent_at IS NOT NULL FROM invoices WHERE id = $1`, id).Scan(&sent); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("invoice %d: %s, sent_at written: %v\n", id, ran.Outcome, sent)
	}
	// Output:
	// invoice 1: complete, sent_at written: true
	// invoice 2: retry, sent_at written: false
}
