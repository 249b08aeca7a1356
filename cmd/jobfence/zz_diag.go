package main

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/worker"
)

type diagT struct {
	mu      sync.Mutex
	start   map[int64]time.Time
	endGap  []time.Duration
	flushes []time.Duration
	jobs    []int
	claims  []time.Duration
	cjobs   []int
	fin     map[string]int
}

func attachDiag(c *worker.Config) *diagT {
	d := &diagT{start: map[int64]time.Time{}, fin: map[string]int{}}
	c.Hooks.JobStart = func(ctx context.Context, j *queue.Job) context.Context {
		d.mu.Lock()
		d.start[j.ID] = time.Now()
		d.mu.Unlock()
		return ctx
	}
	c.Hooks.JobEnd = func(ctx context.Context, j *queue.Job, e worker.JobEnd) {
		d.mu.Lock()
		if s, ok := d.start[j.ID]; ok {
			d.endGap = append(d.endGap, time.Since(s))
			delete(d.start, j.ID)
		}
		d.mu.Unlock()
	}
	c.Hooks.Finish = func(ctx context.Context, f worker.FinishInfo) {
		d.mu.Lock()
		d.flushes = append(d.flushes, f.Duration)
		d.jobs = append(d.jobs, f.Jobs)
		d.fin[fmt.Sprintf("claimed%d", min(f.Claimed, 3))]++
		d.mu.Unlock()
	}
	c.Hooks.Claim = func(ctx context.Context, ci worker.ClaimInfo) {
		d.mu.Lock()
		d.claims = append(d.claims, ci.Duration)
		d.cjobs = append(d.cjobs, ci.Jobs)
		d.mu.Unlock()
	}
	return d
}

func pct(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	return fmt.Sprintf("n=%d mean %v p50 %v p90 %v p99 %v", len(s), sum/time.Duration(len(s)), s[len(s)/2], s[len(s)*9/10], s[len(s)*99/100])
}

func meanI(xs []int) float64 {
	t := 0
	for _, x := range xs {
		t += x
	}
	if len(xs) == 0 {
		return 0
	}
	return float64(t) / float64(len(xs))
}

func (d *diagT) report() {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Printf("DIAG start->end(after flush): %s\nDIAG flush: %s, %.2f jobs each %v\nDIAG claims: %s, %.2f jobs each\n", pct(d.endGap), pct(d.flushes), meanI(d.jobs), d.fin, pct(d.claims), meanI(d.cjobs))
}
