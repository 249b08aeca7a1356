package dashboard

import (
	"context"
	"fmt"
	"time"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

// fleet is the worker registry at a glance, for the overview and /metrics.
type fleet struct {
	// Now is the database's clock when it was read.
	Now time.Time
	// LiveWorkers counts the registered instances reporting now;
	// StaleOutcomes sums, over the registered instances, the outcomes the
	// fence refused as stale since each started.
	LiveWorkers   int64
	StaleOutcomes int64
}

// fleetSQL reads the registry: a row per instance, so it is small.
func fleetSQL() string {
	return `SELECT count(*) FILTER (WHERE ` + pgqueue.LiveWorkerCondition() + `), coalesce(sum(stale), 0)::bigint, now()
FROM jobfence_workers`
}

func (h *handler) readFleet(ctx context.Context) (fleet, error) {
	var f fleet
	if err := h.pool.QueryRow(ctx, fleetSQL()).Scan(&f.LiveWorkers, &f.StaleOutcomes, &f.Now); err != nil {
		return fleet{}, fmt.Errorf("dashboard: workers: %w", err)
	}
	return f, nil
}
