package pgqueue_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

func TestSetLimitRefusesBadFairLimits(t *testing.T) {
	c, _ := newClient(t)
	tests := []struct {
		l    pgqueue.Limit
		want string
	}{
		{pgqueue.Limit{Name: "n", Queue: "q", Concurrency: 1, FairWeights: map[string]int{"a": 2}},
			"pgqueue: invalid limit: FairWeights is set without FairBy"},
		{pgqueue.Limit{Name: "n", Queue: "q", Concurrency: 1, FairBy: "a.b"},
			`pgqueue: invalid limit: FairBy field "a.b" is not a top-level JSON field name`},
		{pgqueue.Limit{Name: "n", Queue: "q", Sequence: true, FairBy: "tenant"},
			"pgqueue: invalid limit: FairBy cannot be combined with Sequence: a sequence runs its partition in insert order"},
		{pgqueue.Limit{Name: "n", Queue: "q", Concurrency: 1, FairBy: "tenant", FairWeights: map[string]int{"a": 2, "b": 0}},
			`pgqueue: invalid limit: FairWeights weight 0 of key "b" is not between 1 and 100`},
		{pgqueue.Limit{Name: "n", Queue: "q", Concurrency: 1, FairBy: "tenant", FairWeights: map[string]int{"a": 101}},
			`pgqueue: invalid limit: FairWeights weight 101 of key "a" is not between 1 and 100`},
	}
	for _, tt := range tests {
		err := c.SetLimit(context.Background(), tt.l)
		var ile *pgqueue.InvalidLimitError
		if err == nil || err.Error() != tt.want || !errors.As(err, &ile) {
			t.Errorf("SetLimit(%+v) = %v, want %q", tt.l, err, tt.want)
		}
	}
}

// tenantJobs enqueues n jobs of tenant in queue q, in one statement.
func tenantJobs(t *testing.T, c *pgqueue.Client, q, tenant string, n int) {
	t.Helper()
	ps := make([]queue.EnqueueParams, n)
	for i := range ps {
		ps[i] = queue.EnqueueParams{Kind: "k", Queue: q, Args: fmt.Appendf(nil, `{"tenant": %q, "i": %d}`, tenant, i)}
	}
	if _, err := c.EnqueueMany(context.Background(), ps); err != nil {
		t.Fatal(err)
	}
}

// tenantOf returns the tenant field of a job's args.
func tenantOf(j *queue.Job) string {
	var a struct{ Tenant string }
	if err := json.Unmarshal(j.EncodedArgs, &a); err != nil {
		return "?"
	}
	return a.Tenant
}

// runGrants completes the limit's running jobs one at a time, n times,
// each completion granting its slot, and returns the tenants of the jobs
// started, in order, and the jobs left running. With running nil it first
// claims the concurrency jobs that hold the slots (they count as
// started).
func runGrants(t *testing.T, c *pgqueue.Client, q string, running []*queue.Job, concurrency, n int) ([]string, []*queue.Job) {
	t.Helper()
	var started []string
	if running == nil {
		running = claim(t, c, q, concurrency+1, time.Hour)
		if len(running) != concurrency {
			t.Fatalf("claimed %d jobs, want the limit's %d", len(running), concurrency)
		}
		for _, j := range running {
			started = append(started, tenantOf(j))
		}
	}
	for range n {
		complete(t, c, running[0])
		running = running[1:]
		next := claim(t, c, q, concurrency+1, time.Hour)
		if len(next) != 1 {
			t.Fatalf("after a completion claimed %d jobs, want 1", len(next))
		}
		running = append(running, next[0])
		started = append(started, tenantOf(next[0]))
	}
	return started, running
}

// TestFairLimitDoesNotStarveASmallTenant: tenant A's backlog of 500 jobs
// is inserted before tenant B's one job, under a limit of 2. Oldest job
// first, B starts after A's whole backlog (not in the first 100 starts);
// with FairBy, B starts within the first 3, the grant after A's first
// completion.
func TestFairLimitDoesNotStarveASmallTenant(t *testing.T) {
	for _, fair := range []bool{false, true} {
		t.Run(fmt.Sprint("fair=", fair), func(t *testing.T) {
			c, _ := newClient(t)
			l := pgqueue.Limit{Name: "shared", Queue: "work", Concurrency: 2}
			if fair {
				l.FairBy = "tenant"
			}
			setLimit(t, c, l)
			tenantJobs(t, c, "work", "A", 500)
			tenantJobs(t, c, "work", "B", 1)
			started, _ := runGrants(t, c, "work", nil, 2, 100)
			at := -1
			for i, tn := range started {
				if tn == "B" {
					at = i
					break
				}
			}
			if fair && (at < 0 || at > 2) {
				t.Fatalf("with FairBy, B's job started at %d (%v...), want within the first 3 starts", at, started[:10])
			}
			if !fair && at >= 0 {
				t.Fatalf("oldest first, B's job started at %d, want after A's backlog", at)
			}
		})
	}
}

// TestFairLimitWeights: tenants A (weight 3), B and C (weight 1) with
// backlogs share a limit of 1: the grants go A A A B C A A A B C ..., and
// a tenant inserted later (D) joins the round at its place in key order.
func TestFairLimitWeights(t *testing.T) {
	c, _ := newClient(t)
	setLimit(t, c, pgqueue.Limit{Name: "shared", Queue: "work", Concurrency: 1, FairBy: "tenant",
		FairWeights: map[string]int{"A": 3}})
	for _, tn := range []string{"A", "B", "C"} {
		tenantJobs(t, c, "work", tn, 20)
	}
	started, running := runGrants(t, c, "work", nil, 1, 19)
	want := "AAABCAAABCAAABCAAABC"
	if got := concat(started); got != want {
		t.Fatalf("started %s, want %s", got, want)
	}
	tenantJobs(t, c, "work", "D", 5)
	started, _ = runGrants(t, c, "work", running, 1, 12)
	// The round goes on after C, whose job ran last: D, which sorts
	// after it, then A's turn, B, C, and round again.
	if got, want := concat(started), "DAAABCDAAABC"; got != want {
		t.Fatalf("after D joined, started %s, want %s", got, want)
	}
	ls, err := c.Limits(context.Background())
	if err != nil || len(ls) != 1 || ls[0].FairBy != "tenant" || !maps.Equal(ls[0].FairWeights, map[string]int{"A": 3}) {
		t.Fatalf("Limits = %+v, %v", ls, err)
	}
}

func concat(ss []string) string {
	out := ""
	for _, s := range ss {
		out += s
	}
	return out
}

// TestFairByKeysJobsWaitingBefore: jobs that waited under a limit before
// it was given FairBy are keyed by it, and served in turn; a job without
// the field is keyed "" (first in key order).
func TestFairByKeysJobsWaitingBefore(t *testing.T) {
	c, db := newClient(t)
	setLimit(t, c, pgqueue.Limit{Name: "shared", Queue: "work", Concurrency: 1})
	tenantJobs(t, c, "work", "A", 30)
	tenantJobs(t, c, "work", "B", 2)
	if _, err := c.Enqueue(context.Background(), queue.EnqueueParams{Kind: "k", Queue: "work"}); err != nil {
		t.Fatal(err)
	}
	setLimit(t, c, pgqueue.Limit{Name: "shared", Queue: "work", Concurrency: 1, FairBy: "tenant"})
	var unkeyed int
	if err := db.Pool.QueryRow(context.Background(),
		`SELECT count(*) FROM jobfence_jobs WHERE state = 'limited' AND limit_fair IS NULL`).Scan(&unkeyed); err != nil {
		t.Fatal(err)
	}
	if unkeyed != 0 {
		t.Fatalf("%d waiting jobs have no fair key after SetLimit gave the limit FairBy", unkeyed)
	}
	started, _ := runGrants(t, c, "work", nil, 1, 5)
	// A's first job took the slot before FairBy; then, round-robin from
	// the first key: "" (the job without a tenant), A, B, A, B.
	if want := []string{"A", "", "A", "B", "A", "B"}; !slices.Equal(started, want) {
		t.Fatalf("started %q, want %q", started, want)
	}
}
