package workflow_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
	"github.com/jobfence/jobfence/workflow"
)

type Charge struct {
	Order string `json:"order"`
}

func (Charge) Kind() string { return "example_charge" }

type Reserve struct {
	Order string `json:"order"`
}

func (Reserve) Kind() string { return "example_reserve" }

type Ship struct {
	Order string `json:"order"`
}

func (Ship) Kind() string { return "example_ship" }

// ChargeResult is what charge records for the tasks after it.
type ChargeResult struct {
	ChargeID string `json:"charge_id"`
}

// Example builds a workflow in which reserve waits for charge and reads
// its output, and ship waits for reserve; it runs the tasks one at a time
// through the worker (RunOne), as a fleet would run them side by side.
func Example() {
	ctx := context.Background()
	db, err := jobfencetest.OpenDB(ctx, os.Getenv("DATABASE_URL")) // a migrated schema; in a service, your pool
	if err != nil {
		fmt.Println(err)
		return
	}
	defer db.Close()
	jobs := pgqueue.New(db.Pool, pgqueue.Config{})

	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[Charge]) error {
		fmt.Println("charging", job.Args.Order)
		return worker.RecordOutput(ctx, ChargeResult{ChargeID: "ch_" + job.Args.Order})
	})
	worker.Add(reg, func(ctx context.Context, job *worker.Job[Reserve]) error {
		charge, err := workflow.Output[ChargeResult](ctx, "charge")
		if err != nil {
			return err
		}
		fmt.Println("reserving stock for", job.Args.Order, "paid by", charge.ChargeID)
		return nil
	})
	worker.Add(reg, func(ctx context.Context, job *worker.Job[Ship]) error {
		fmt.Println("shipping", job.Args.Order)
		return nil
	})
	w, err := worker.New(jobs, reg, worker.Config{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		fmt.Println(err)
		return
	}

	wf := workflow.New("order 42").
		Add("charge", Charge{Order: "42"}, nil).
		Add("reserve", Reserve{Order: "42"}, &workflow.TaskOpts{DependsOn: []string{"charge"}}).
		Add("ship", Ship{Order: "42"}, &workflow.TaskOpts{DependsOn: []string{"reserve"}})
	res, err := workflow.Insert(ctx, jobs, wf)
	if err != nil {
		fmt.Println(err)
		return
	}
	for {
		if _, err := w.RunOne(ctx, "default"); errors.Is(err, worker.ErrNoJob) {
			break
		} else if err != nil {
			fmt.Println(err)
			return
		}
	}
	info, err := jobs.Workflow(ctx, res.ID)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("done:", info.Done(), "completed:", info.Counts["completed"])
	// Output:
	// charging 42
	// reserving stock for 42 paid by ch_42
	// shipping 42
	// done: true completed: 3
}
