package main

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/cpuclock"
	"github.com/jobfence/jobfence/internal/pgtest"
)

// The floor (--floor) is the least a PostgreSQL queue of this design does
// for a job, on the same server and machine, in the same process: a
// table with a primary key and one partial index for the claim; an insert
// that commits (durably) and then wakes the claimer with a NOTIFY in a
// transaction of its own that does not wait for its flush, both in one
// round trip, as jobfence's insert does; one claimer that LISTENs and
// claims up to 100 jobs a statement with FOR UPDATE SKIP LOCKED; a
// goroutine a job; completions in batches. It keeps none of jobfence's
// guarantees (no fence, lease, attempt count, limit, priority, pause or
// bound), so it says what the machine allows, not what a job queue should
// do.
const (
	floorTableSQL = `CREATE TABLE floor_jobs (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    state text NOT NULL DEFAULT 'available',
    args jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    attempted_at timestamptz);
CREATE INDEX floor_jobs_available ON floor_jobs (id) WHERE state = 'available'`
	floorInsertSQL   = `INSERT INTO floor_jobs (args) VALUES ($1)`
	floorWakeSQL     = `SELECT set_config('synchronous_commit', 'off', true), pg_notify($1, '')`
	floorCompleteSQL = `UPDATE floor_jobs SET state = 'completed' WHERE id = ANY($1)`
	floorClaimSQL    = `UPDATE floor_jobs SET state = 'running', attempted_at = now()
WHERE id IN (SELECT id FROM floor_jobs WHERE state = 'available' ORDER BY id LIMIT $1 FOR UPDATE SKIP LOCKED)
RETURNING id, args, attempted_at - created_at`
	// floorClaimLimit is the most jobs a claim takes: the latency mode's
	// worker runs 100 at once.
	floorClaimLimit = 100
)

// floorResult is one floor run.
type floorResult struct {
	start, dbStart, insert, claims percentiles
	claimed                        int64
	offered, late                  int64
	cost                           cost
	cpu                            time.Duration
	machine                        cpuclock.Machine
	load                           string
}

func (r floorResult) String() string {
	return fmt.Sprintf("the same load through a minimal queue (no fence, lease, attempt count or limit; %d offers, %d waited for a free producer)\n"+
		"    enqueue-to-start %s (%d jobs offered after the warm-up)\n"+
		"    database clock   %s\n"+
		"    insert call %s; claims %s, %.2f jobs each (%d claims)\n"+
		"    cost: %s; load %s%s",
		r.offered, r.late, r.start, r.start.n, r.dbStart, r.insert, r.claims,
		float64(r.claimed)/float64(max(r.claims.n, 1)), r.claims.n, r.cost, r.load, cpuPerJob(r.start.n, r.cpu, r.machine))
}

// floorOnce offers the floor the load latencyOnce offers jobfence, in a
// schema of its own, timed the same way: from the producer's clock read
// before the insert to the start of the job's goroutine.
func floorOnce(ctx context.Context, baseURL string, cfg benchConfig, settings serverSettings) (floorResult, error) {
	name := fmt.Sprintf("jobfence_floor_%d", time.Now().UnixNano())
	pr, err := newProbe(ctx, baseURL, name, settings)
	if err != nil {
		return floorResult{}, err
	}
	defer pr.close()
	if _, err := pr.conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{name}.Sanitize()); err != nil {
		return floorResult{}, err
	}
	defer pr.conn.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{name}.Sanitize()+" CASCADE")
	url, err := withApplicationName(pgtest.WithSearchPath(baseURL, name), name)
	if err != nil {
		return floorResult{}, err
	}
	prodPool, err := newBenchPool(ctx, url, int32(cfg.producers))
	if err != nil {
		return floorResult{}, err
	}
	defer prodPool.Close()
	if _, err := prodPool.Exec(ctx, floorTableSQL); err != nil {
		return floorResult{}, fmt.Errorf("floor: create its table: %w", err)
	}
	workPool, err := newBenchPool(ctx, url, int32(cfg.conns))
	if err != nil {
		return floorResult{}, err
	}
	defer workPool.Close()
	listen, err := pgx.Connect(ctx, url)
	if err != nil {
		return floorResult{}, err
	}
	defer listen.Close(context.Background())
	channel := name
	if _, err := listen.Exec(ctx, "LISTEN "+pgx.Identifier{channel}.Sanitize()); err != nil {
		return floorResult{}, err
	}

	res := floorResult{}
	warmup := min(cfg.duration/5, benchWarmup)
	var warmFrom atomic.Int64
	warmFrom.Store(time.Now().Add(time.Hour).UnixNano())
	var mu sync.Mutex
	var startTimes, dbTimes, claimTimes []time.Duration
	var started atomic.Int64
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var bg sync.WaitGroup
	errs := make(chan error, 3)
	fail := func(err error) {
		select {
		case errs <- err:
		default:
		}
		stop()
	}

	wake := make(chan struct{}, 1)
	bg.Add(1)
	go func() {
		defer bg.Done()
		for {
			if _, err := listen.WaitForNotification(runCtx); err != nil {
				return
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	done := make(chan int64, 4*floorClaimLimit)
	bg.Add(1)
	go func() {
		defer bg.Done()
		for {
			var id int64
			select {
			case id = <-done:
			case <-runCtx.Done():
				return
			}
			ids := []int64{id}
		more:
			for len(ids) < 1000 {
				select {
				case id := <-done:
					ids = append(ids, id)
				default:
					break more
				}
			}
			if _, err := workPool.Exec(runCtx, floorCompleteSQL, ids); err != nil {
				if runCtx.Err() == nil {
					fail(fmt.Errorf("floor: complete: %w", err))
				}
				return
			}
		}
	}()
	bg.Add(1)
	go func() {
		defer bg.Done()
		// A poll bounds a lost wake-up's wait, as the worker's
		// PollInterval (1s by default) does.
		poll := time.NewTicker(time.Second)
		defer poll.Stop()
		for {
			select {
			case <-wake:
			case <-poll.C:
			case <-runCtx.Done():
				return
			}
			for {
				began := time.Now()
				rows, _ := workPool.Query(runCtx, floorClaimSQL, floorClaimLimit)
				type claimed struct {
					args benchArgs
					db   time.Duration
					id   int64
				}
				var got []claimed
				var c claimed
				_, err := pgx.ForEachRow(rows, []any{&c.id, &c.args, &c.db}, func() error {
					got = append(got, c)
					return nil
				})
				if err != nil {
					if runCtx.Err() == nil {
						fail(fmt.Errorf("floor: claim: %w", err))
					}
					return
				}
				if began.UnixNano() >= warmFrom.Load() {
					mu.Lock()
					claimTimes = append(claimTimes, time.Since(began))
					res.claimed += int64(len(got))
					mu.Unlock()
				}
				for _, c := range got {
					go func() {
						now := time.Now().UnixNano()
						if c.args.At >= warmFrom.Load() {
							mu.Lock()
							startTimes = append(startTimes, time.Duration(now-c.args.At))
							dbTimes = append(dbTimes, c.db)
							mu.Unlock()
						}
						started.Add(1)
						select {
						case done <- c.id:
						case <-runCtx.Done():
						}
					}()
				}
				if len(got) < floorClaimLimit {
					break
				}
			}
		}
	}()

	offers := make(chan struct{}, max(int(cfg.rate), 1))
	var inserted atomic.Int64
	var insertTimes []time.Duration
	var producers sync.WaitGroup
	for range cfg.producers {
		producers.Add(1)
		go func() {
			defer producers.Done()
			for range offers {
				at := time.Now()
				if err := floorInsert(runCtx, prodPool, channel, at); err != nil {
					fail(err)
					continue
				}
				inserted.Add(1)
				if at.UnixNano() >= warmFrom.Load() {
					mu.Lock()
					insertTimes = append(insertTimes, time.Since(at))
					mu.Unlock()
				}
			}
		}()
	}
	var win window
	res.offered, res.late, err = pace(runCtx, cfg, warmup, offers, func() {}, func() error { return win.open(ctx, pr, &warmFrom) })
	close(offers)
	producers.Wait()
	// Every inserted job must start, as in latencyOnce.
	deadline := time.Now().Add(30 * time.Second)
	for err == nil && runCtx.Err() == nil && started.Load() < inserted.Load() && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	res.cpu, res.machine = win.cpu()
	stop()
	bg.Wait()
	select {
	case err := <-errs:
		return floorResult{}, err
	default:
	}
	if err != nil {
		return floorResult{}, err
	}
	if n, want := started.Load(), inserted.Load(); n < want {
		return floorResult{}, fmt.Errorf("floor: only %d of %d jobs ran within 30s of the last insert", n, want)
	}
	c1, err := pr.counters(ctx)
	if err != nil {
		return floorResult{}, err
	}
	res.load = loadAverage()
	mu.Lock()
	defer mu.Unlock()
	res.start, res.dbStart = summarise(startTimes), summarise(dbTimes)
	res.insert, res.claims = summarise(insertTimes), summarise(claimTimes)
	res.cost = costBetween(win.counters, c1, int64(res.start.n))
	return res, nil
}

// floorInsert inserts one job made at at and wakes the claimer, in one
// round trip: the insert's transaction, then the wake-up's.
func floorInsert(ctx context.Context, pool *pgxpool.Pool, channel string, at time.Time) error {
	args, err := json.Marshal(benchArgs{At: at.UnixNano()})
	if err != nil {
		return err
	}
	var b pgx.Batch
	b.Queue("BEGIN")
	b.Queue(floorInsertSQL, args)
	b.Queue("COMMIT")
	b.Queue(floorWakeSQL, channel)
	if err := pool.SendBatch(ctx, &b).Close(); err != nil {
		return fmt.Errorf("floor: insert: %w", err)
	}
	return nil
}
