// Package telemetry instruments jobfence with OpenTelemetry metrics and
// traces, and adds trace ids to its logs.
//
// It uses only the OpenTelemetry API: install an SDK and exporters in your
// main package (the Prometheus exporter turns jobfence.jobs.completed into
// jobfence_jobs_completed_total), or pass providers in Options. Everything
// attaches through public hooks that users can use too (worker.Hooks,
// queue.InsertHook, scheduler.Config.OnFire and OnMissed,
// idempotency.Options.OnEvent), with one call per component:
//
//	telemetry.PGQueue(&pgCfg, telemetry.Options{})  // producer spans, traceparent stored with each job
//	telemetry.Worker(&workerCfg, telemetry.Options{}) // job metrics, consumer spans, trace ids in logs
//
// A jobfence.Client makes those calls itself, for each component it builds,
// given Options as its Config.Telemetry:
//
//	jobfence.NewClient(pool, jobfence.Config{..., Telemetry: telemetry.Options{}})
//
// Traces: an enqueue is a producer span ("send <queue>"), whose W3C
// traceparent is stored with the job (packed into its trace_context
// column in PostgreSQL, message headers in Kafka) and comes back in its
// Metadata; every attempt is a consumer span
// ("process <queue>") linked to it, attributed after OpenTelemetry's
// messaging semantic conventions (messaging.system "jobfence",
// messaging.destination.name the queue) plus jobfence.job.id, .kind,
// .attempt and .fence.
//
// The Kafka backend and the stampede guard are instrumented by packages of
// their own, telemetry/kafkatelemetry and telemetry/stampedetelemetry, so
// that importing telemetry links no Kafka or Redis client.
//
// See docs/observability.md, which lists every series.
package telemetry
