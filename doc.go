// Package jobfence is the one entry point of a service that uses jobfence
// with PostgreSQL: a Client inserts jobs, runs them with its handlers,
// enqueues the fires of its cron schedules, and starts and stops all of it
// together, as river.Client does for River. It is also the one surface for
// the rest: the stored jobs (List, Retry, RetryForce, Delete,
// RetryMatching, DeleteMatching, Counts), workflows (InsertWorkflow,
// Workflows), the fleet's limits (Limits), cron schedules (Schedules, on
// every client, insert-only included) and queue pauses (Queues).
// PoolConfig sizes a pool for the client's queues.
//
//	reg := jobfence.NewRegistry()
//	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[SendInvoice]) error {
//		return send(ctx, job.Args.InvoiceID, job.IdempotencyKey())
//	})
//	queues := map[string]int{"default": 50}
//	poolCfg, err := jobfence.PoolConfig(os.Getenv("DATABASE_URL"), queues) // MaxConns 52
//	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
//	client, err := jobfence.NewClient(pool, jobfence.Config{
//		Queues:   queues,
//		Handlers: reg,
//		Schedules: []jobfence.Schedule{
//			{Name: "purge-sessions", Spec: "0 3 * * *", Args: PurgeSessions{}},
//		},
//		Telemetry: telemetry.Options{}, // optional: metrics, traces, trace ids in logs
//	})
//	...
//	err = client.Start(ctx)
//	_, err = client.InsertTx(ctx, tx, SendInvoice{InvoiceID: 42}, nil)
//	...
//	err = client.Stop(shutdownCtx) // the scheduler, then the worker, within shutdownCtx
//
// A Client is three objects of the packages underneath, the layer below,
// which it builds from its Config and which stay usable alone: a
// pgqueue.Client (inserts, claims, fenced outcomes; Client.PGQueue), a
// worker.Worker (Client.Worker) and a scheduler.Scheduler
// (Client.Scheduler). Every instance of a service
// creates the same Client: each job is claimed by one instance under a
// fence, and each fire of a schedule becomes one job for the whole fleet,
// with no leader.
//
// A Client with no queues runs no jobs: it is insert-only, for a process
// that only enqueues (an API server whose jobs another deployment works),
// and its Start returns ErrInsertOnly unless it has schedules to enqueue.
//
// The guide is docs/client.md.
package jobfence
