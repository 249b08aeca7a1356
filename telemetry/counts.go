package telemetry

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/metric"

	"github.com/jobfence/jobfence/queue"
)

// counted is one of the counters every attempt adds to.
type counted int

const (
	countCompleted counted = iota
	countRetried
	countDiscarded
	countCancelled
	countSnoozed
	countStale
	countLost
	countStuck
	// countUnknownKind counts, among the snoozed, the jobs put back because
	// the worker has no handler for their kind.
	countUnknownKind
	numCounted
)

// jobCounts are a queue and kind's per-attempt counts. An attempt adds one
// to one of them (a put-back for an unknown kind to two), an atomic add, and the SDK reads them through an
// observable counter when it collects: a synchronous counter's Add costs
// the SDK a check of the attribute set, a lookup of its series and an
// exemplar offer on every attempt, as much as a histogram measurement.
// What is exported is the same (a monotonic sum per queue and kind, under
// the same name and unit, a series appearing once it counts something),
// except that these counters carry no exemplars: the duration histogram's
// do, naming a sampled attempt's trace.
type jobCounts [numCounted]atomic.Int64

// outcomeCounted is the counter an attempt's outcome adds to.
func outcomeCounted(o queue.Outcome) (counted, bool) {
	switch o {
	case queue.OutcomeComplete:
		return countCompleted, true
	case queue.OutcomeRetry:
		return countRetried, true
	case queue.OutcomeDiscard:
		return countDiscarded, true
	case queue.OutcomeCancel:
		return countCancelled, true
	case queue.OutcomeSnooze:
		return countSnoozed, true
	}
	return 0, false
}

// countInstruments creates the observable counters of jobCounts, which
// report what cache's series counted, for as long as the meter provider
// lives.
func countInstruments(m metric.Meter, cache *seriesCache) error {
	var ins [numCounted]metric.Int64ObservableCounter
	var err error
	for i, c := range [numCounted]struct{ name, desc string }{
		countCompleted:   {"jobfence.jobs.completed", "Jobs completed."},
		countRetried:     {"jobfence.jobs.retried", "Failed attempts scheduled to run again."},
		countDiscarded:   {"jobfence.jobs.discarded", "Jobs given up on: out of attempts, or arguments that do not decode."},
		countCancelled:   {"jobfence.jobs.cancelled", "Jobs cancelled by their handler."},
		countSnoozed:     {"jobfence.jobs.snoozed", "Jobs put back without spending an attempt."},
		countStale:       {"jobfence.jobs.stale", "Outcomes the backend refused because the job's fence was stale."},
		countLost:        {"jobfence.jobs.lost", "Jobs whose lease was lost (or that were cancelled) before their outcome was recorded."},
		countStuck:       {"jobfence.jobs.stuck", "Handlers the worker gave up on: still running a grace after their context ended (worker.Config.StuckGrace); their jobs were left to the rescuer."},
		countUnknownKind: {"jobfence.jobs.unknown_kind", "Jobs put back because the worker has no handler for their kind (counted as snoozed too): during a rolling deploy, until an instance that knows the kind runs them."},
	} {
		if ins[i], err = m.Int64ObservableCounter(c.name, metric.WithUnit("{job}"), metric.WithDescription(c.desc)); err != nil {
			return err
		}
	}
	observables := make([]metric.Observable, len(ins))
	for i, in := range ins {
		observables[i] = in
	}
	_, err = m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		series := cache.m.Load()
		if series == nil {
			return nil
		}
		for _, s := range *series {
			for i := range s.counts {
				// A series appears once it has counted something, as a
				// synchronous counter's does.
				if n := s.counts[i].Load(); n != 0 {
					o.ObserveInt64(ins[i], n, s.observe)
				}
			}
		}
		return nil
	}, observables...)
	return err
}
