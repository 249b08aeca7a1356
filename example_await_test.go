package jobfence_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/jobfence/jobfence"
)

// PriceOrder prices an order; its handler records the total.
type PriceOrder struct {
	Items int `json:"items"`
}

// Kind names the handler that runs PriceOrder jobs.
func (PriceOrder) Kind() string { return "price_order" }

// Price is PriceOrder's output.
type Price struct {
	Cents int `json:"cents"`
}

// ExampleResult inserts a job and awaits its result: the output its
// handler recorded, decoded, or the error it ended with.
func ExampleResult() {
	ctx := context.Background()
	db := openExampleDB(ctx)
	defer db.Close()

	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[PriceOrder]) error {
		if job.Args.Items == 0 {
			return jobfence.JobCancel(errors.New("empty order"))
		}
		return jobfence.RecordOutput(ctx, Price{Cents: 250 * job.Args.Items})
	})
	client, err := jobfence.NewClient(db.Pool, jobfence.Config{Queues: map[string]int{"default": 10}, Handlers: reg})
	if err != nil {
		log.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(ctx, 25*time.Second)
		defer cancel()
		_ = client.Stop(stopCtx)
	}()

	waitCtx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	res, err := client.Insert(ctx, PriceOrder{Items: 3}, nil)
	if err != nil {
		log.Fatal(err)
	}
	price, err := jobfence.Result[Price](waitCtx, client, res.ID)
	fmt.Println("price:", price.Cents, err)

	res, err = client.Insert(ctx, PriceOrder{}, nil)
	if err != nil {
		log.Fatal(err)
	}
	_, err = jobfence.Result[Price](waitCtx, client, res.ID)
	var failed *jobfence.JobFailedError
	if errors.As(err, &failed) {
		fmt.Println(failed.State+":", failed.LastError)
	}
	// Output:
	// price: 750 <nil>
	// cancelled: jobfence: job cancelled: empty order
}
