package stampede

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/redistest"
)

// BenchmarkGetHit measures the hit path, one Redis round trip, next to a
// plain GET of the same entry.
func BenchmarkGetHit(b *testing.B) {
	client, prefix := redistest.Client(b)
	g := newGuard[string](b, client, prefix, Options{Beta: -1})
	ctx := context.Background()
	compute := func(context.Context) (string, error) { return "a cached value of moderate size", nil }
	if _, err := g.Get(ctx, "k", time.Hour, compute); err != nil {
		b.Fatal(err)
	}
	b.Run("redis-GET", func(b *testing.B) {
		for b.Loop() {
			if err := client.Get(ctx, g.valueKey("k")).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Guard.Get", func(b *testing.B) {
		for b.Loop() {
			if _, err := g.Get(ctx, "k", time.Hour, compute); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkExpiryWindow keeps a hot key under load from 4 instances (a
// Guard and a Redis client each) with 4 readers apiece, and reports per
// expiry window (one iteration) how many computations ran, how many flights
// found the key missing, and how many reads stalled (took longer than half
// the computation time), with XFetch off and on (Beta 1).
func BenchmarkExpiryWindow(b *testing.B) {
	const (
		instances   = 4
		readers     = 4
		ttl         = 200 * time.Millisecond
		computeTime = 20 * time.Millisecond
	)
	for _, bc := range []struct {
		name string
		beta float64
	}{{"xfetch=off", -1}, {"xfetch=on", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			_, prefix := redistest.Client(b)
			var computations atomic.Int64
			compute := func(context.Context) (int64, error) {
				time.Sleep(computeTime)
				return computations.Add(1), nil
			}
			guards := make([]*Guard[int64], instances)
			for i := range guards {
				c, _ := redistest.Client(b)
				guards[i] = newGuard[int64](b, c, prefix, Options{Beta: bc.beta, WaitTimeout: time.Minute, PollInterval: 5 * time.Millisecond})
			}
			if _, err := guards[0].Get(context.Background(), "hot", ttl, compute); err != nil {
				b.Fatal(err)
			}

			var (
				stop    atomic.Bool
				stalled atomic.Int64
				reads   atomic.Int64
				mu      sync.Mutex
				lat     []time.Duration
				wg      sync.WaitGroup
			)
			computations.Store(0)
			misses := func() (n uint64) {
				for _, g := range guards {
					n += g.Stats().Misses
				}
				return n
			}
			missesBefore := misses()
			for i := range instances * readers {
				g := guards[i%instances]
				wg.Go(func() {
					var mine []time.Duration
					for !stop.Load() {
						t0 := time.Now()
						if _, err := g.Get(context.Background(), "hot", ttl, compute); err != nil {
							b.Error(err)
							return
						}
						d := time.Since(t0)
						mine = append(mine, d)
						reads.Add(1)
						if d > computeTime/2 {
							stalled.Add(1)
						}
						time.Sleep(time.Millisecond)
					}
					mu.Lock()
					lat = append(lat, mine...)
					mu.Unlock()
				})
			}
			for b.Loop() {
				time.Sleep(ttl)
			}
			stop.Store(true)
			wg.Wait()
			slices.Sort(lat)
			n := float64(b.N)
			b.ReportMetric(float64(computations.Load())/n, "computations/window")
			b.ReportMetric(float64(misses()-missesBefore)/n, "misses/window")
			b.ReportMetric(float64(stalled.Load())/n, "stalled-reads/window")
			b.ReportMetric(float64(reads.Load())/n, "reads/window")
			if len(lat) > 0 {
				b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
			}
		})
	}
}
