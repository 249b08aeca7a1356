package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

var quiet = slog.New(slog.DiscardHandler)

// recorder collects the fires reported through Config.OnFire, per instance.
type recorder struct {
	mu    sync.Mutex
	fires map[int][]scheduler.Fire
}

func newRecorder() *recorder { return &recorder{fires: map[int][]scheduler.Fire{}} }

func (r *recorder) onFire(instance int) func(scheduler.Fire) {
	return func(f scheduler.Fire) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.fires[instance] = append(r.fires[instance], f)
	}
}

// inserted returns the fires instance inserted, oldest first.
func (r *recorder) inserted(instance int) []scheduler.Fire {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []scheduler.Fire
	for _, f := range r.fires[instance] {
		if f.Inserted {
			out = append(out, f)
		}
	}
	return out
}

// insertedAfter counts the fires instance inserted that are later than t.
func (r *recorder) insertedAfter(instance int, t time.Time) int {
	n := 0
	for _, f := range r.inserted(instance) {
		if f.At.After(t) {
			n++
		}
	}
	return n
}

// saw reports whether each of n instances reported the fire at t.
func (r *recorder) saw(n int, t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range n {
		if !slices.ContainsFunc(r.fires[i], func(f scheduler.Fire) bool { return f.At.Equal(t) }) {
			return false
		}
	}
	return true
}

// start starts s and stops it when the test ends, if the test has not.
func start(t *testing.T, s *scheduler.Scheduler) {
	t.Helper()
	if err := s.Start(context.Background()); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
}

func stop(t *testing.T, s *scheduler.Scheduler) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
}

// storedJob is a job row as the tests check it.
type storedJob struct {
	Key   string
	At    time.Time
	State string
	Error string
}

func jobs(t *testing.T, pool *pgxpool.Pool) []storedJob {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT unique_key, scheduled_at, state, coalesce(errors->0->>'error', '') FROM jobfence_jobs ORDER BY scheduled_at, id`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []storedJob
	for rows.Next() {
		var j storedJob
		if err := rows.Scan(&j.Key, &j.At, &j.State, &j.Error); err != nil {
			t.Fatal(err)
		}
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkOnePerFire fails unless js are the jobs of consecutive fires of a
// per-second schedule name, one job each, keyed by their fire.
func checkOnePerFire(t *testing.T, name string, js []storedJob) {
	t.Helper()
	if len(js) == 0 {
		t.Fatal("no jobs")
	}
	for i, j := range js {
		want := js[0].At.Add(time.Duration(i) * time.Second)
		if !j.At.Equal(want) {
			t.Fatalf("job %d is the fire at %v, want %v (a gap or a duplicate): %v", i, j.At, want, js)
		}
		if k := scheduler.UniqueKey(name, j.At); j.Key != k {
			t.Fatalf("job of fire %v has key %q, want %q", j.At, j.Key, k)
		}
	}
}

func lastFire(t *testing.T, pool *pgxpool.Pool, name string) time.Time {
	t.Helper()
	var last *time.Time
	if err := pool.QueryRow(context.Background(), `SELECT last_fire FROM jobfence_schedules WHERE name = $1`, name).Scan(&last); err != nil {
		t.Fatal(err)
	}
	if last == nil {
		return time.Time{}
	}
	return *last
}

// TestFleetOneJobPerFire runs 20 instances, each with its own pool and a
// clock between 2 s behind and 2 s ahead, over a per-second schedule: every
// instance handles every fire, exactly one inserts it, and each fire is one
// job.
func TestFleetOneJobPerFire(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const instances = 20
	rec := newRecorder()
	var fleet []*scheduler.Scheduler
	for i := range instances {
		offset := time.Duration(i*4000/(instances-1)-2000) * time.Millisecond
		s := scheduler.New(pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quiet}), scheduler.Config{
			Now:    func() time.Time { return time.Now().Add(offset) },
			Logger: quiet,
			OnFire: rec.onFire(i),
		})
		if err := s.Add("tick", "* * * * * *", "tick", map[string]int{"instance": i}, scheduler.Options{}); err != nil {
			t.Fatal(err)
		}
		fleet = append(fleet, s)
	}
	for _, s := range fleet {
		start(t, s)
	}
	// Every instance's loop handles the fires after its start, which was at
	// most 2 s ahead of now by the real clock.
	first := time.Now().Add(2 * time.Second).Truncate(time.Second).Add(time.Second)
	const fires = 12
	last := first.Add((fires - 1) * time.Second)
	testwatch.WaitFor(t, 2*time.Minute, "every instance to handle the last fire", func() bool { return rec.saw(instances, last) })
	for _, s := range fleet {
		stop(t, s)
	}

	for at := first; !at.After(last); at = at.Add(time.Second) {
		inserted := 0
		for i := range instances {
			n := 0
			for _, f := range rec.fires[i] {
				if f.At.Equal(at) {
					n++
					if f.Inserted {
						inserted++
					}
				}
			}
			if n != 1 {
				t.Errorf("instance %d handled the fire at %v %d times, want once", i, at, n)
			}
		}
		if inserted != 1 {
			t.Errorf("the fire at %v was inserted by %d instances, want 1", at, inserted)
		}
	}
	all := jobs(t, db.Pool)
	checkOnePerFire(t, "tick", all)
	var inRange int
	for _, j := range all {
		if !j.At.Before(first) && !j.At.After(last) {
			inRange++
		}
	}
	if inRange != fires {
		t.Errorf("%d jobs for the %d fires from %v to %v", inRange, fires, first, last)
	}
	if got := lastFire(t, db.Pool, "tick"); !got.Equal(all[len(all)-1].At) {
		t.Errorf("stored last fire %v, want the latest job's fire %v", got, all[len(all)-1].At)
	}
}

func lookup(js []storedJob, at time.Time) storedJob {
	for _, j := range js {
		if j.At.Equal(at) {
			return j
		}
	}
	return storedJob{}
}

// TestJobFields shows the job a fire enqueues: AddArgs's kind and args, the
// options' queue, priority and attempts, the fire as ScheduledAt and the
// fire's unique key.
func TestJobFields(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	client := pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet})
	rec := newRecorder()
	s := scheduler.New(client, scheduler.Config{Logger: quiet, OnFire: rec.onFire(0)})
	err := s.AddArgs("pdf-report", "* * * * * *", ReportArgs{Format: "pdf"}, scheduler.Options{Queue: "reports", Priority: 2, MaxAttempts: 3})
	if err != nil {
		t.Fatal(err)
	}
	start(t, s)
	testwatch.WaitFor(t, time.Minute, "a fire", func() bool { return len(rec.inserted(0)) >= 1 })
	stop(t, s)
	f := rec.inserted(0)[0]
	j, err := client.Get(context.Background(), f.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if j.Kind != "nightly_report" || string(j.EncodedArgs) != `{"format": "pdf"}` || j.Queue != "reports" ||
		j.Priority != 2 || j.MaxAttempts != 3 || !j.ScheduledAt.Equal(f.At) || j.UniqueKey != scheduler.UniqueKey("pdf-report", f.At) {
		t.Fatalf("job %+v for fire %v", j, f.At)
	}
	if want := fmt.Sprintf("cron:pdf-report:%d", f.At.Unix()); j.UniqueKey != want {
		t.Fatalf("unique key %q, want %q", j.UniqueKey, want)
	}
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
