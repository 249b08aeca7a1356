package telemetry

import (
	"context"
	"errors"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/jobfence/jobfence/idempotency"
)

// Idempotency attaches metrics to the idempotency store that o configures:
// call it before idempotency.New. It chains o.OnEvent (the user's first)
// and counts jobfence.idempotency.runs (fn ran, takeovers included),
// .replays, .key_reuses, .in_progress and .takeovers, by scope. A store's
// WithScope derivatives report their own scope: scopes per tenant make a
// series per tenant.
func Idempotency(o *idempotency.Options, opts Options) error {
	if o == nil {
		return errors.New("jobfence: telemetry: nil idempotency options")
	}
	m := opts.withDefaults().meter()
	counters := map[idempotency.EventKind]metric.Int64Counter{}
	var errs []error
	for kind, c := range map[idempotency.EventKind][2]string{
		idempotency.EventRun:        {"jobfence.idempotency.runs", "Calls that ran their operation (takeovers included)."},
		idempotency.EventReplay:     {"jobfence.idempotency.replays", "Calls answered with a stored response."},
		idempotency.EventKeyReused:  {"jobfence.idempotency.key_reuses", "Calls refused because the key was used with another request (ErrKeyReused)."},
		idempotency.EventInProgress: {"jobfence.idempotency.in_progress", "Calls that found their key held by another caller."},
		idempotency.EventTakeover:   {"jobfence.idempotency.takeovers", "Keys taken over from a caller whose lease ran out."},
	} {
		ctr, err := m.Int64Counter(c[0], metric.WithUnit("{call}"), metric.WithDescription(c[1]))
		errs = append(errs, err)
		counters[kind] = ctr
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("jobfence: telemetry: %w", err)
	}
	prev := o.OnEvent
	o.OnEvent = func(ctx context.Context, e idempotency.Event) {
		if prev != nil {
			prev(ctx, e)
		}
		attrs := metric.WithAttributes(attribute.String("scope", e.Scope))
		counters[e.Kind].Add(ctx, 1, attrs)
		if e.Kind == idempotency.EventTakeover {
			counters[idempotency.EventRun].Add(ctx, 1, attrs) // a takeover runs the operation too
		}
	}
	return nil
}
