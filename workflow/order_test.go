package workflow_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/worker"
	"github.com/jobfence/jobfence/workflow"
)

// The order workflow of the tests: charge -> reserve and receipt -> ship.

type chargeArgs struct {
	Order string `json:"order"`
	Cents int    `json:"cents"`
}

func (chargeArgs) Kind() string { return "charge" }

type reserveArgs struct {
	Order string `json:"order"`
}

func (reserveArgs) Kind() string { return "reserve" }

type receiptArgs struct {
	Order string `json:"order"`
}

func (receiptArgs) Kind() string { return "receipt" }

type shipArgs struct {
	Order string `json:"order"`
}

func (shipArgs) Kind() string { return "ship" }

// chargeOut is charge's output.
type chargeOut struct {
	ChargeID string `json:"charge_id"`
}

// orderWorkflow builds the order workflow for order.
func orderWorkflow(order string) *workflow.Workflow {
	return workflow.New("order "+order).
		Add("charge", chargeArgs{Order: order, Cents: 1999}, nil).
		Add("reserve", reserveArgs{Order: order}, &workflow.TaskOpts{DependsOn: []string{"charge"}}).
		Add("receipt", receiptArgs{Order: order}, &workflow.TaskOpts{DependsOn: []string{"charge"}}).
		Add("ship", shipArgs{Order: order}, &workflow.TaskOpts{DependsOn: []string{"reserve", "receipt"}})
}

const effectsTable = `CREATE TABLE effects (task text NOT NULL, job_id bigint NOT NULL, fence bigint NOT NULL, seen text NOT NULL)`

// addOrderHandlers registers the order workflow's handlers. charge
// records its charge ID (by, and the fence); the others record, in the
// effects table and within their completion's transaction, the output
// they read from the tasks they depend on, and output their own.
func addOrderHandlers(reg *worker.Registry, by string, afterCharge func(fence int64)) {
	worker.Add(reg, func(ctx context.Context, job *worker.Job[chargeArgs]) error {
		if err := worker.RecordOutput(ctx, chargeOut{ChargeID: fmt.Sprintf("%s-%d", by, job.Fence)}); err != nil {
			return err
		}
		if afterCharge != nil {
			afterCharge(job.Fence)
		}
		return nil
	})
	effect := func(ctx context.Context, tx pgx.Tx, task string, job *worker.Job[reserveArgs], seen string) error {
		_, err := tx.Exec(ctx, `INSERT INTO effects VALUES ($1, $2, $3, $4)`, task, job.ID, job.Fence, seen)
		if err != nil {
			return err
		}
		return worker.RecordOutput(ctx, task+" saw "+seen)
	}
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[reserveArgs]) error {
		c, err := workflow.Output[chargeOut](ctx, "charge")
		if err != nil {
			return err
		}
		return effect(ctx, tx, "reserve", job, c.ChargeID)
	})
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[receiptArgs]) error {
		c, err := workflow.Output[chargeOut](ctx, "charge")
		if err != nil {
			return err
		}
		return effect(ctx, tx, "receipt", &worker.Job[reserveArgs]{Job: job.Job, Args: reserveArgs(job.Args)}, c.ChargeID)
	})
	worker.AddTx(reg, func(ctx context.Context, tx pgx.Tx, job *worker.Job[shipArgs]) error {
		r, err := workflow.Output[string](ctx, "reserve")
		if err != nil {
			return err
		}
		p, err := workflow.Output[string](ctx, "receipt")
		if err != nil {
			return err
		}
		return effect(ctx, tx, "ship", &worker.Job[reserveArgs]{Job: job.Job, Args: reserveArgs(job.Args)}, r+" / "+p)
	})
}

// effectsOf returns, per task, the values its handler saw, one per run.
func effectsOf(ctx context.Context, pool *pgxpool.Pool) (map[string][]string, error) {
	rows, err := pool.Query(ctx, `SELECT task, seen FROM effects ORDER BY job_id`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string][]string{}
	for rows.Next() {
		var task, seen string
		if err := rows.Scan(&task, &seen); err != nil {
			return nil, err
		}
		out[task] = append(out[task], seen)
	}
	return out, rows.Err()
}

// workerConfig is the workers' configuration in the tests: the queues of
// the workflow's tasks, quick polls, and a short lease.
func workerConfig(lease time.Duration) worker.Config {
	return worker.Config{
		Queues: map[string]int{"default": 10}, Lease: lease, PollInterval: 50 * time.Millisecond,
		RetryPolicy: worker.ExponentialRetry{Max: time.Millisecond},
	}
}
