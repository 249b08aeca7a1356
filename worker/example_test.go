package worker_test

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// SendInvoice is a job's typed arguments.
type SendInvoice struct {
	InvoiceID int64 `json:"invoice_id"`
}

// Kind names the handler that runs SendInvoice jobs.
func (SendInvoice) Kind() string { return "send_invoice" }

// Example embeds a worker in a service: register typed handlers, start,
// and drain on SIGTERM.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	pool, err := pgxpool.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		panic(err)
	}
	defer pool.Close()
	jobs := pgqueue.New(pool, pgqueue.Config{})

	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[SendInvoice]) error {
		// job.IdempotencyKey() is the same on every attempt: hand it to the
		// mail or payment provider so a retry cannot act twice.
		fmt.Println("sending invoice", job.Args.InvoiceID, "key", job.IdempotencyKey())
		return nil
	}, worker.HandlerOptions{Timeout: 30 * time.Second})

	w, err := worker.New(jobs, reg, worker.Config{Queues: map[string]int{"default": 50}})
	if err != nil {
		panic(err)
	}
	if err := w.Start(ctx); err != nil {
		panic(err)
	}
	if _, err := jobs.Insert(ctx, SendInvoice{InvoiceID: 42}, nil); err != nil {
		panic(err)
	}

	<-ctx.Done()
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.Stop(stopCtx) // running jobs finish; any still running at the deadline are put back
}

// ExampleAddTx runs a handler whose writes commit with the job's fenced
// completion: if the worker lost the job (paused past its lease, and the job
// was claimed again), the whole transaction rolls back.
func ExampleAddTx() {
	reg := worker.NewRegistry()
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[SendInvoice]) error {
		_, err := tx.Exec(ctx, `UPDATE invoices SET sent_at = now() WHERE id = $1`, job.Args.InvoiceID)
		return err
	})
}
