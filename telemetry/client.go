package telemetry

import (
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
	"github.com/jobfence/jobfence/worker"
)

// InstrumentPGQueue is PGQueue(cfg, o). With InstrumentWorker and
// InstrumentScheduler it makes Options a jobfence.Telemetry, so that one
// field instruments everything a jobfence.Client builds:
//
//	jobfence.NewClient(pool, jobfence.Config{..., Telemetry: telemetry.Options{}})
func (o Options) InstrumentPGQueue(cfg *pgqueue.Config) error { return PGQueue(cfg, o) }

// InstrumentWorker is Worker(cfg, o); see InstrumentPGQueue.
func (o Options) InstrumentWorker(cfg *worker.Config) error { return Worker(cfg, o) }

// InstrumentScheduler is Scheduler(cfg, o); see InstrumentPGQueue.
func (o Options) InstrumentScheduler(cfg *scheduler.Config) error { return Scheduler(cfg, o) }
