package telemetry

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobfence/jobfence/scheduler"
)

// Scheduler attaches metrics to the scheduler that cfg configures: call it
// before scheduler.New. It chains cfg.OnFire and cfg.OnMissed (the user's
// run first) and counts, by schedule:
//
//   - jobfence.scheduler.fires: fires this instance enqueued;
//   - jobfence.scheduler.duplicates: fires another instance had enqueued
//     first (absorbed by the unique key);
//   - jobfence.scheduler.missed: missed fires the catch-up policy dropped,
//     as each instance that found them reports them.
func Scheduler(cfg *scheduler.Config, opts Options) error {
	if cfg == nil {
		return errors.New("jobfence: telemetry: nil scheduler config")
	}
	m := opts.withDefaults().meter()
	fires, err1 := m.Int64Counter("jobfence.scheduler.fires", metric.WithUnit("{fire}"), metric.WithDescription("Cron fires this instance enqueued."))
	dups, err2 := m.Int64Counter("jobfence.scheduler.duplicates", metric.WithUnit("{fire}"), metric.WithDescription("Cron fires another instance had already enqueued."))
	missed, err3 := m.Int64Counter("jobfence.scheduler.missed", metric.WithUnit("{fire}"), metric.WithDescription("Missed cron fires dropped by the catch-up policy."))
	if err := errors.Join(err1, err2, err3); err != nil {
		return fmt.Errorf("jobfence: telemetry: %w", err)
	}
	prevFire, prevMissed := cfg.OnFire, cfg.OnMissed
	cfg.OnFire = func(f scheduler.Fire) {
		if prevFire != nil {
			prevFire(f)
		}
		attrs := metric.WithAttributes(attribute.String("schedule", f.Schedule))
		if f.Inserted {
			fires.Add(context.Background(), 1, attrs)
		} else {
			dups.Add(context.Background(), 1, attrs)
		}
	}
	cfg.OnMissed = func(ms scheduler.Missed) {
		if prevMissed != nil {
			prevMissed(ms)
		}
		missed.Add(context.Background(), int64(ms.Fires), metric.WithAttributes(attribute.String("schedule", ms.Schedule)))
	}
	return nil
}
