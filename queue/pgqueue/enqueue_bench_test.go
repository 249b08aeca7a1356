package pgqueue_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/cpuclock"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// BenchmarkEnqueue: single jobs enqueued by 8 goroutines, each job in a
// transaction of its own, as a web service's requests enqueue them, with
// a LISTEN connection hearing the wake-ups as a worker's does. Beside the
// time per job it reports the CPU time per job of this process
// (client-µs/job: the producers and the listener) and of their server
// backends (server-µs/job), which other load on a shared machine
// disturbs far less than it disturbs time, and the wake-ups sent per
// job. Sub-benchmarks: the insert and its wake-up in one round trip (the
// default, wake-ups coalesced per queue), the same with a wake-up for
// every insert (a closed client's way), or two round trips.
func BenchmarkEnqueue(b *testing.B) {
	db := pgtest.New(b)
	for _, mode := range []struct {
		name          string
		twoRoundTrips bool
		everyWake     bool
	}{{"one-round-trip", false, false}, {"one-round-trip-every-wake", false, true}, {"two-round-trips", true, false}} {
		b.Run(mode.name, func(b *testing.B) {
			ctx := context.Background()
			app := "bench-enqueue-" + mode.name
			pool := pgtest.AppPool(b, db, app, 9)
			c := pgqueue.New(pool, pgqueue.Config{})
			enqueueOne := c.Enqueue
			if mode.twoRoundTrips {
				enqueueOne = pgqueue.TwoRoundTripEnqueue(c)
			}
			if mode.everyWake {
				c.Close()
			}
			q := "bench-" + db.Schema
			ln, err := pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			defer ln.Release()
			if _, err := ln.Exec(ctx, "LISTEN jobfence_insert"); err != nil {
				b.Fatal(err)
			}
			lctx, stop := context.WithCancel(ctx)
			heard := make(chan struct{})
			go func() {
				defer close(heard)
				for lctx.Err() == nil {
					_, _ = ln.Conn().WaitForNotification(lctx)
				}
			}()
			const producers = 8
			enqueue := func(n int64) {
				var next atomic.Int64
				var wg sync.WaitGroup
				for range producers {
					wg.Go(func() {
						for next.Add(1) <= n {
							if _, err := enqueueOne(ctx, queue.EnqueueParams{Queue: q, Kind: "k", Args: []byte(`{"at":1}`)}); err != nil {
								b.Error(err)
								return
							}
						}
					})
				}
				wg.Wait()
			}
			enqueue(producers) // opens the connections
			pids := backends(b, db, app)
			s0, c0, w0 := serverCPU(b, pids), cpuclock.Process(), pgqueue.WakesSent(c)
			b.ResetTimer()
			enqueue(int64(b.N))
			b.StopTimer()
			s1, c1 := serverCPU(b, pids), cpuclock.Process()
			wakesDone(b, c)
			w1 := pgqueue.WakesSent(c)
			stop()
			<-heard
			b.ReportMetric(float64((c1-c0).Microseconds())/float64(b.N), "client-µs/job")
			b.ReportMetric(float64((s1-s0).Microseconds())/float64(b.N), "server-µs/job")
			b.ReportMetric(float64(w1-w0)/float64(b.N), "wakes/job")
		})
	}
}

// wakesDone waits for c's last wake-ups to be done, so that
// they are counted.
func wakesDone(b *testing.B, c *pgqueue.Client) {
	b.Helper()
	testwatch.WaitFor(b, time.Minute, "the last wake-ups to be done", func() bool {
		return pgqueue.WakesInFlight(c) == 0
	})
}

// backends returns the server pids of app's connections.
func backends(b *testing.B, db *pgtest.DB, app string) []int {
	b.Helper()
	rows, err := db.Pool.Query(context.Background(), `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, app)
	if err != nil {
		b.Fatal(err)
	}
	defer rows.Close()
	var pids []int
	for rows.Next() {
		var pid int
		if err := rows.Scan(&pid); err != nil {
			b.Fatal(err)
		}
		pids = append(pids, pid)
	}
	return pids
}

// serverCPU is the user and system CPU time the processes pids have used
// (the test server runs on this machine), from /proc.
func serverCPU(b *testing.B, pids []int) time.Duration {
	b.Helper()
	var ticks int64
	for _, pid := range pids {
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			b.Skipf("server CPU time: %v", err)
		}
		// The fields after the command's closing parenthesis: state is
		// the first, utime the 12th, stime the 13th.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		for _, s := range f[11:13] {
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			ticks += n
		}
	}
	// Linux counts in USER_HZ, 100 a second on every architecture Go
	// supports there.
	return time.Duration(ticks) * 10 * time.Millisecond
}
