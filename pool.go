package jobfence

import (
	"fmt"
	"maps"
	"math"
	"slices"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

// PoolConfig parses url (a postgres:// URL or a key=value DSN, as
// pgxpool.ParseConfig reads it) into a pool configuration sized for a
// Client that works queues: its MaxConns is raised, never lowered, to the
// sum of the queues' concurrencies plus pgqueue.DefaultTxReserve (2: the
// connections kept for heartbeats, claims and outcomes), so that every
// transactional handler that may run at once holds a connection of its
// own and the worker does not warn "fewer pool connections than
// concurrency". Pass it the map given as Config.Queues:
//
//	queues := map[string]int{"default": 50}
//	poolCfg, err := jobfence.PoolConfig(os.Getenv("DATABASE_URL"), queues) // MaxConns 52
//	pool, err := pgxpool.NewWithConfig(ctx, poolCfg)
//	client, err := jobfence.NewClient(pool, jobfence.Config{Queues: queues, Handlers: reg})
//
// An insert-only client (no queues) keeps pgxpool's default MaxConns. A
// Config.PGQueue.TxReserve above the default needs that many more
// connections: add them to MaxConns. A queue with a concurrency below 1 is
// an error, as NewClient would refuse it.
func PoolConfig(url string, queues map[string]int) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("jobfence: pool config: %w", err)
	}
	need := int64(pgqueue.DefaultTxReserve)
	for _, q := range slices.Sorted(maps.Keys(queues)) {
		n := queues[q]
		if n < 1 {
			return nil, fmt.Errorf("jobfence: pool config: queue %q has concurrency %d: want 1 or more", q, n)
		}
		need += int64(n)
	}
	if len(queues) == 0 {
		return cfg, nil
	}
	if need > math.MaxInt32 {
		return nil, fmt.Errorf("jobfence: pool config: the queues' concurrencies add up to %d connections, more than a pool holds", need)
	}
	if int64(cfg.MaxConns) < need {
		cfg.MaxConns = int32(need)
	}
	return cfg, nil
}
