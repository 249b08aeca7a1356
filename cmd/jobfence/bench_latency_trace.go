package main

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"
)

// stageTrace follows each job of a latency run through the stages between
// its insert and its handler, so that the slow tail can be put down to one
// of them rather than guessed at: the insert call, the wait until the claim
// that took it began (the commit's wake-up, the listener and the fetch
// loop; negative where the claim began before the insert call returned,
// since the call returns after its commit and its wake-up), that claim's round trip, the dispatch to a runner, and the runner's
// start of the handler. All times are this process's clock.
type stageTrace struct {
	mu       sync.Mutex
	inserted map[int64]int64 // job ID: when its insert call returned
	started  map[int64]int64 // job ID: when Hooks.JobStart saw it
	claims   []claimSpan     // every claim's round trip, in end order
	jobs     []tracedJob     // jobs that reached their handler
}

type claimSpan struct{ start, end int64 }

type tracedJob struct{ id, at, handler int64 }

func newStageTrace() *stageTrace {
	return &stageTrace{inserted: map[int64]int64{}, started: map[int64]int64{}}
}

func (t *stageTrace) insert(id, returned int64) {
	t.mu.Lock()
	t.inserted[id] = returned
	t.mu.Unlock()
}

func (t *stageTrace) claim(end int64, took time.Duration) {
	t.mu.Lock()
	t.claims = append(t.claims, claimSpan{start: end - int64(took), end: end})
	t.mu.Unlock()
}

func (t *stageTrace) jobStart(id, at int64) {
	t.mu.Lock()
	t.started[id] = at
	t.mu.Unlock()
}

func (t *stageTrace) handler(id, at, now int64) {
	t.mu.Lock()
	t.jobs = append(t.jobs, tracedJob{id: id, at: at, handler: now})
	t.mu.Unlock()
}

// stages are one job's times from its insert to its handler's start.
type stages struct {
	total, insert, wait, claim, dispatch, run time.Duration
}

// breakdown returns the mean of each stage over all traced jobs and over
// the slowest 1 % of them (those at or above the 99th percentile of the
// whole), and how many jobs each covers. A job is traced when its insert's
// return, its claim and its JobStart were all seen.
func (t *stageTrace) breakdown() (all, slowest stages, nAll, nSlow int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	claims := slices.Clone(t.claims)
	slices.SortFunc(claims, func(a, b claimSpan) int { return int(a.end - b.end) })
	var st []stages
	for _, j := range t.jobs {
		ret, ok1 := t.inserted[j.id]
		js, ok2 := t.started[j.id]
		// The claim that took the job is the last one to end before the
		// worker dispatched it.
		i := sort.Search(len(claims), func(i int) bool { return claims[i].end > js }) - 1
		if !ok1 || !ok2 || i < 0 {
			continue
		}
		c := claims[i]
		st = append(st, stages{
			total:    time.Duration(j.handler - j.at),
			insert:   time.Duration(ret - j.at),
			wait:     time.Duration(c.start - ret),
			claim:    time.Duration(c.end - c.start),
			dispatch: time.Duration(js - c.end),
			run:      time.Duration(j.handler - js),
		})
	}
	if len(st) == 0 {
		return stages{}, stages{}, 0, 0
	}
	slices.SortFunc(st, func(a, b stages) int { return int(a.total - b.total) })
	slow := st[min(len(st)-1, int(0.99*float64(len(st)))):]
	return meanStages(st), meanStages(slow), len(st), len(slow)
}

// meanStages averages each stage, so that the stages add up to the total
// (medians would not).
func meanStages(st []stages) stages {
	var sum stages
	for _, s := range st {
		sum.total += s.total
		sum.insert += s.insert
		sum.wait += s.wait
		sum.claim += s.claim
		sum.dispatch += s.dispatch
		sum.run += s.run
	}
	n := time.Duration(len(st))
	return stages{total: sum.total / n, insert: sum.insert / n, wait: sum.wait / n,
		claim: sum.claim / n, dispatch: sum.dispatch / n, run: sum.run / n}
}

func (s stages) String() string {
	r := func(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }
	return fmt.Sprintf("total %s = insert call %s + until its claim began %s + claim %s + dispatch %s + handler start %s",
		r(s.total), r(s.insert), r(s.wait), r(s.claim), r(s.dispatch), r(s.run))
}
