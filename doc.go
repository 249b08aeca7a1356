// Package jobfence is the one entry point of a service that uses jobfence
// with PostgreSQL: a Client inserts jobs, runs them with its handlers,
// enqueues the fires of its cron schedules, and starts and stops all of it
// together, as river.Client does for River.
//
//	reg := jobfence.NewRegistry()
//	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[SendInvoice]) error {
//		return send(ctx, job.Args.InvoiceID, job.IdempotencyKey())
//	})
//	client, err := jobfence.NewClient(pool, jobfence.Config{
//		Queues:   map[string]int{"default": 50},
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
// A Client is three objects of the packages underneath, which it builds
// from its Config and which stay usable alone: a pgqueue.Client (inserts,
// claims, fenced outcomes; Client.PGQueue), a worker.Worker (Client.Worker)
// and a scheduler.Scheduler (Client.Scheduler). Every instance of a service
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
