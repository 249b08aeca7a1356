package model

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/jobfence/jobfence/queue"
)

// fairJob is a job of the fair limit's queue as one step left it.
type fairJob struct {
	state string
	key   string
	// waits marks a limited job that a grant must serve in its key's
	// turn: one with no deadline (a job past its deadline is passed over).
	waits bool
}

// fairState is what the fair rule carries from step to step: the fair
// queue's jobs after the last step, and for each fair key that had a
// waiting job through the steps since its last grant, the grants its
// partition made to other keys meanwhile.
type fairState struct {
	jobs  map[int64]fairJob
	skips map[string]int
}

// fairBound is the most grants to other keys that a fair key with a
// waiting job may see before one of its own: the other keys' weights,
// one turn of theirs (docs/limits.md#fair-share).
func fairBound(spec map[string]int, key string) int {
	n := 0
	for p := range partitions {
		k := fairKeyOf(p)
		if k == key {
			continue
		}
		n += max(1, spec[k])
	}
	return n
}

// fairKeyOf is the args field p of partition number p: the fair limit's key.
func fairKeyOf(p int) string { return fmt.Sprintf("p%d", p) }

// checkFair checks the fair rule after a step: reading the fair queue's
// jobs, it counts the grants of the step (a job limited before it and
// available or running after), by key, and fails if a key that had a
// waiting job before the step and after it has seen more grants to other
// keys since its own last grant than one turn of theirs.
func (r *runner) checkFair() {
	l := r.s.limits["fair"]
	if l == nil || l.deleted {
		return
	}
	ctx, cancel := r.opCtx()
	defer cancel()
	rows, err := r.admin.Query(ctx, `SELECT id, state, coalesce(limit_fair, ''), state = 'limited' AND deadline IS NULL, priority
        FROM jobfence_jobs WHERE queue = 'fair'`)
	if !r.called("read the fair queue", err, nil) {
		return
	}
	now := map[int64]fairJob{}
	for rows.Next() {
		var id int64
		var j fairJob
		var priority int
		if err := rows.Scan(&id, &j.state, &j.key, &j.waits, &priority); err != nil {
			rows.Close()
			r.called("read the fair queue", err, nil)
			return
		}
		now[id] = j
		if info := r.s.jobs[id]; info != nil && (priority < queue.MinPriority || priority > info.priority) {
			rows.Close()
			r.fail("aging", "job %d has priority %d, inserted with %d: aging only improves a priority, to %d at best",
				id, priority, info.priority, queue.MinPriority)
			return
		}
	}
	rows.Close()
	if !r.called("read the fair queue", rows.Err(), nil) {
		return
	}
	f := &r.s.fair
	prev := f.jobs
	f.jobs = now
	if f.skips == nil {
		f.skips = map[string]int{}
	}
	grants := map[string]int{}
	total := 0
	waitedBefore, waitsAfter := map[string]bool{}, map[string]bool{}
	for id, p := range prev {
		if p.waits {
			waitedBefore[p.key] = true
		}
		if n, ok := now[id]; ok && p.state == "limited" && (n.state == "available" || n.state == "running") {
			grants[p.key]++
			total++
		}
	}
	for _, n := range now {
		if n.waits {
			waitsAfter[n.key] = true
		}
	}
	for _, key := range slices.Sorted(maps.Keys(f.skips)) {
		if !waitedBefore[key] || !waitsAfter[key] {
			delete(f.skips, key)
		}
	}
	for _, key := range slices.Sorted(maps.Keys(waitedBefore)) {
		switch {
		case grants[key] > 0 || !waitsAfter[key]:
			delete(f.skips, key)
		default:
			f.skips[key] += total
			if bound := fairBound(l.spec.FairWeights, key); f.skips[key] > bound {
				var others []string
				for k, n := range grants {
					others = append(others, fmt.Sprintf("%s×%d", k, n))
				}
				slices.Sort(others)
				r.fail("fair", "fair key %s of limit fair has waited through %d grants to other keys (this step: %s), more than one turn of their weights (%d)",
					key, f.skips[key], strings.Join(others, ", "), bound)
				return
			}
		}
	}
}
