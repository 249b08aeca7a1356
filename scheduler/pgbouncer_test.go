package scheduler_test

import (
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

// TestPgBouncerFleetCron: 20 scheduler instances, each with a pool of its
// own through one PgBouncer in transaction mode (pool size 5, so the
// instances share server connections), fire a per-second schedule: each
// fire is exactly one job, and every instance handled every fire.
func TestPgBouncerFleetCron(t *testing.T) {
	db := pgtest.NewBounced(t, pgtest.BouncedOptions{PoolSize: 5})
	const instances, fires = 20, 5
	rec := newRecorder()
	var fleet []*scheduler.Scheduler
	for i := range instances {
		s := scheduler.New(pgqueue.New(db.BouncedPool(t, 2), pgqueue.Config{Logger: quiet, PollOnly: true}),
			scheduler.Config{Logger: quiet, OnFire: rec.onFire(i)})
		if err := s.Add("fleet", "* * * * * *", "fleet_tick", nil, scheduler.Options{}); err != nil {
			t.Fatal(err)
		}
		fleet = append(fleet, s)
	}
	for _, s := range fleet {
		start(t, s)
	}
	first := time.Now().Truncate(time.Second).Add(2 * time.Second)
	last := first.Add((fires - 1) * time.Second)
	testwatch.WaitFor(t, 2*time.Minute, "every instance to handle the last fire", func() bool { return rec.saw(instances, last) })
	for _, s := range fleet {
		stop(t, s)
	}
	for at := first; !at.After(last); at = at.Add(time.Second) {
		inserted := 0
		for i := range instances {
			for _, f := range rec.inserted(i) {
				if f.At.Equal(at) {
					inserted++
				}
			}
		}
		if inserted != 1 {
			t.Errorf("the fire at %v was inserted by %d instances, want 1", at, inserted)
		}
	}
	all := jobs(t, db.Pool)
	checkOnePerFire(t, "fleet", all)
	inRange := 0
	for _, j := range all {
		if !j.At.Before(first) && !j.At.After(last) {
			inRange++
		}
	}
	if inRange != fires {
		t.Errorf("%d jobs for the %d fires from %v to %v", inRange, fires, first, last)
	}
}
