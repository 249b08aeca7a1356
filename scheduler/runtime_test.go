package scheduler_test

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

// syncInterval is the tests' Config.SyncInterval: short, so that a change
// reaches every instance within a fraction of a second.
const syncInterval = 200 * time.Millisecond

// quietPeriod is how long a test watches for fires that must not come: a
// SyncInterval and then two fires of a per-second schedule.
const quietPeriod = syncInterval + 2500*time.Millisecond

// firedJob is a job of a schedule's fire as the tests check it.
type firedJob struct {
	ID        int64
	Fire      time.Time
	Queue     string
	Args      string
	Triggered bool
}

// firedJobs returns the jobs of schedule name's fires, by fire time.
func firedJobs(t *testing.T, pool *pgxpool.Pool, name string) []firedJob {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
SELECT id, substring(unique_key FROM '[0-9]+(?:-run)?$'), queue, args::text
FROM jobfence_jobs WHERE starts_with(unique_key, $1) ORDER BY scheduled_at, id`, "cron:"+name+":")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []firedJob
	for rows.Next() {
		var j firedJob
		var suffix string
		if err := rows.Scan(&j.ID, &suffix, &j.Queue, &j.Args); err != nil {
			t.Fatal(err)
		}
		suffix, j.Triggered = strings.CutSuffix(suffix, "-run")
		unix, err := strconv.ParseInt(suffix, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		j.Fire = time.Unix(unix, 0).UTC()
		out = append(out, j)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkInsertedOnce fails unless each fire of schedule name that any of n
// instances reported was inserted by exactly one of them.
func (r *recorder) checkInsertedOnce(t *testing.T, n int, name string) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	inserted := map[time.Time]int{}
	for i := range n {
		for _, f := range r.fires[i] {
			if f.Schedule != name {
				continue
			}
			if _, ok := inserted[f.At]; !ok {
				inserted[f.At] = 0
			}
			if f.Inserted {
				inserted[f.At]++
			}
		}
	}
	for at, k := range inserted {
		if k != 1 {
			t.Errorf("the fire of %s at %v was inserted by %d instances, want 1", name, at, k)
		}
	}
}

// handled counts the fires of name that instance reported.
func (r *recorder) handled(instance int, name string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, f := range r.fires[instance] {
		if f.Schedule == name {
			n++
		}
	}
	return n
}

// sawAfter reports whether each of n instances reported one same fire of
// name later than t.
func (r *recorder) sawAfter(n int, name string, t time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	seen := map[time.Time]int{}
	for i := range n {
		mine := map[time.Time]bool{}
		for _, f := range r.fires[i] {
			if f.Schedule == name && f.At.After(t) && !mine[f.At] {
				mine[f.At] = true
				seen[f.At]++
			}
		}
	}
	for _, k := range seen {
		if k == n {
			return true
		}
	}
	return false
}

// TestRuntimeSchedulesFleet runs three scheduler instances with no
// schedule of their own and changes a schedule while they run: added on
// one instance, every instance fires it, one job per fire; paused, no
// instance enqueues a fire; resumed, they fire again, and the fires of the
// pause are not caught up although its policy is CatchUpAll; changed
// (spec, args, queue), the fires follow the new definition; triggered from
// the three instances at once, one job; deleted, no more fires.
func TestRuntimeSchedulesFleet(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	const n = 3
	rec := newRecorder()
	var fleet []*scheduler.Scheduler
	for i := range n {
		s := scheduler.New(pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quiet}), scheduler.Config{
			Logger: quiet, OnFire: rec.onFire(i), SyncInterval: syncInterval,
		})
		start(t, s)
		fleet = append(fleet, s)
	}

	// Added on one instance: every instance fires it.
	added := time.Now()
	created, err := fleet[0].Put(ctx, "rt", "* * * * * *", "rt", map[string]int{"v": 1},
		scheduler.Options{Queue: "q1", CatchUp: scheduler.CatchUpAll, CatchUpWindow: time.Minute})
	if err != nil || !created {
		t.Fatalf("Put = %v, %v; want created", created, err)
	}
	if created, err := fleet[0].Put(ctx, "rt", "* * * * * *", "rt", map[string]int{"v": 1},
		scheduler.Options{Queue: "q1", CatchUp: scheduler.CatchUpAll, CatchUpWindow: time.Minute}); err != nil || created {
		t.Fatalf("the same Put again = %v, %v; want not created", created, err)
	}
	testwatch.WaitFor(t, 30*time.Second, "every instance to fire the added schedule", func() bool {
		return rec.sawAfter(n, "rt", added.Add(time.Second))
	})
	if js := firedJobs(t, db.Pool, "rt"); js[0].Fire.Before(added.Truncate(time.Second)) || js[0].Queue != "q1" || js[0].Args != `{"v": 1}` {
		t.Fatalf("first job %+v, want a fire after the Put at %v on q1 with args {\"v\": 1}", js[0], added)
	}

	// Paused through another instance: nothing is enqueued once Pause
	// returns.
	if changed, err := fleet[1].Pause(ctx, "rt", "alice"); err != nil || !changed {
		t.Fatalf("Pause = %v, %v", changed, err)
	}
	paused := time.Now()
	before := len(firedJobs(t, db.Pool, "rt"))
	time.Sleep(quietPeriod)
	if js := firedJobs(t, db.Pool, "rt"); len(js) != before {
		t.Fatalf("%d jobs enqueued while paused: %+v", len(js)-before, js[before:])
	}
	if changed, err := scheduler.Pause(ctx, db.Pool, "rt", "bob"); err != nil || changed {
		t.Fatalf("second Pause = %v, %v; want unchanged", changed, err)
	}
	if i, err := scheduler.Get(ctx, db.Pool, "rt"); err != nil || !i.Paused || i.PausedBy != "alice" || !i.Runtime {
		t.Fatalf("Get while paused = %+v, %v", i, err)
	}

	// Resumed through the package: every instance fires again, and the
	// fires of the pause stay missed.
	if changed, err := scheduler.Resume(ctx, db.Pool, "rt"); err != nil || !changed {
		t.Fatalf("Resume = %v, %v", changed, err)
	}
	resumed := time.Now()
	testwatch.WaitFor(t, 30*time.Second, "every instance to fire the resumed schedule", func() bool {
		return rec.sawAfter(n, "rt", resumed.Add(time.Second))
	})
	for _, j := range firedJobs(t, db.Pool, "rt") {
		if j.Fire.After(paused) && !j.Fire.After(resumed.Add(-time.Second)) {
			t.Errorf("the fire at %v, between the pause at %v and the resume at %v, was enqueued", j.Fire, paused, resumed)
		}
	}

	// Changed: every other second, other args, another queue.
	if created, err := fleet[2].Put(ctx, "rt", "*/2 * * * * *", "rt", map[string]int{"v": 2},
		scheduler.Options{Queue: "q2"}); err != nil || created {
		t.Fatalf("Put of a change = %v, %v", created, err)
	}
	changed := time.Now()
	testwatch.WaitFor(t, 30*time.Second, "every instance to fire the changed schedule", func() bool {
		return rec.sawAfter(n, "rt", changed.Add(time.Second))
	})
	for _, j := range firedJobs(t, db.Pool, "rt") {
		if j.Fire.After(changed) && (j.Fire.Unix()%2 != 0 || j.Queue != "q2" || j.Args != `{"v": 2}`) {
			t.Errorf("job %+v after the change at %v: want an even second, q2, {\"v\": 2}", j, changed)
		}
	}

	// Triggered from the three instances at once, several times each: one
	// job, right now.
	var wg sync.WaitGroup
	gate := make(chan struct{})
	results := make(chan scheduler.Fire, 3*n)
	errs := make(chan error, 3*n)
	for i := range 3 * n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			f, err := fleet[i%n].Trigger(ctx, "rt")
			if err != nil {
				errs <- err
				return
			}
			results <- f
		}()
	}
	triggered := time.Now()
	close(gate)
	wg.Wait()
	close(results)
	close(errs)
	for err := range errs {
		t.Fatalf("Trigger: %v", err)
	}
	var inserted int
	var fire scheduler.Fire
	for f := range results {
		if fire.JobID == 0 {
			fire = f
		}
		if f.JobID != fire.JobID || !f.At.Equal(fire.At) || !f.Triggered || f.Schedule != "rt" {
			t.Errorf("triggers returned %+v and %+v: want the same job", fire, f)
		}
		if f.Inserted {
			inserted++
		}
	}
	if inserted != 1 || fire.At.Before(triggered.Truncate(time.Second)) || fire.At.After(time.Now()) {
		t.Fatalf("%d of %d triggers inserted, the fire %+v; want one, now", inserted, 3*n, fire)
	}
	var ofTrigger int
	for _, j := range firedJobs(t, db.Pool, "rt") {
		if j.Triggered {
			ofTrigger++
			if j.ID != fire.JobID || !j.Fire.Equal(fire.At) || j.Queue != "q2" || j.Args != `{"v": 2}` {
				t.Errorf("the triggered fire's job %+v, want job %d of %v on q2", j, fire.JobID, fire.At)
			}
		}
	}
	if ofTrigger != 1 {
		t.Fatalf("%d jobs of the triggered fire at %v, want 1", ofTrigger, fire.At)
	}
	// A trigger in the next second, as one of two sent at once may be,
	// still joins the first: it is within TriggerWindow.
	time.Sleep(time.Until(fire.At.Add(time.Second + 100*time.Millisecond)))
	if again, err := fleet[1].Trigger(ctx, "rt"); err != nil || again.JobID != fire.JobID || again.Inserted || !again.At.Equal(fire.At) {
		t.Fatalf("a trigger the second after = %+v, %v; want the first trigger's job %d", again, err, fire.JobID)
	}

	// Deleted through one instance: no more fires.
	if found, err := fleet[0].Delete(ctx, "rt"); err != nil || !found {
		t.Fatalf("Delete = %v, %v", found, err)
	}
	before = len(firedJobs(t, db.Pool, "rt"))
	time.Sleep(quietPeriod)
	if js := firedJobs(t, db.Pool, "rt"); len(js) != before {
		t.Fatalf("%d jobs enqueued after Delete: %+v", len(js)-before, js[before:])
	}
	if _, err := fleet[1].Trigger(ctx, "rt"); !errors.Is(err, scheduler.ErrNotFound) {
		t.Fatalf("Trigger of a deleted schedule: %v, want ErrNotFound", err)
	}
	if _, err := scheduler.Pause(ctx, db.Pool, "rt", "x"); !errors.Is(err, scheduler.ErrNotFound) {
		t.Fatalf("Pause of a deleted schedule: %v, want ErrNotFound", err)
	}
	rec.checkInsertedOnce(t, n, "rt")
	seen := map[firedJob]bool{}
	for _, j := range firedJobs(t, db.Pool, "rt") {
		k := firedJob{Fire: j.Fire, Triggered: j.Triggered}
		if seen[k] {
			t.Errorf("two jobs of the fire at %v (triggered %v)", j.Fire, j.Triggered)
		}
		seen[k] = true
	}
}

// TestPauseDecidedInTheFire: an instance that reads the table only once
// an hour (it cannot learn of the pause by polling) still enqueues no fire
// once Pause returns: its next fire's transaction finds the schedule
// paused, and the instance reads the table again at once.
func TestPauseDecidedInTheFire(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	if _, err := scheduler.Put(ctx, db.Pool, "rt", "* * * * * *", "rt", nil, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	var logs logbuf.Buffer
	rec := newRecorder()
	s := scheduler.New(pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quiet}), scheduler.Config{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), OnFire: rec.onFire(0), SyncInterval: time.Hour,
	})
	start(t, s)
	started := time.Now()
	testwatch.WaitFor(t, 30*time.Second, "a fire", func() bool { return rec.insertedAfter(0, started) > 0 })
	if _, err := scheduler.Pause(ctx, db.Pool, "rt", "ops"); err != nil {
		t.Fatal(err)
	}
	before := len(firedJobs(t, db.Pool, "rt"))
	time.Sleep(quietPeriod)
	if js := firedJobs(t, db.Pool, "rt"); len(js) != before {
		t.Fatalf("%d jobs enqueued while paused: %+v", len(js)-before, js[before:])
	}
	if !strings.Contains(logs.String(), "scheduler: schedule paused") {
		t.Fatalf("the instance did not learn of the pause from its refused fire:\n%s", logs.String())
	}
}

// TestCodeDefinedAndRuntime: a schedule defined in code is fired only by
// the instances that define it, and the code's definition wins at Start
// over a change made at run time; a pause lasts across the restart. A
// schedule added at run time is fired also by an instance started later.
func TestCodeDefinedAndRuntime(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	rec := newRecorder()
	newInstance := func(i int, code bool) *scheduler.Scheduler {
		s := scheduler.New(pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quiet}), scheduler.Config{
			Logger: quiet, OnFire: rec.onFire(i), SyncInterval: syncInterval,
		})
		if code {
			if err := s.Add("code", "* * * * * *", "code", map[string]string{"from": "code"}, scheduler.Options{}); err != nil {
				t.Fatal(err)
			}
		}
		return s
	}
	a, b := newInstance(0, true), newInstance(1, false)
	start(t, a)
	start(t, b)
	if _, err := b.Put(ctx, "rt", "* * * * * *", "rt", nil, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	// A instance started after the Put fires the run-time schedule too.
	c := newInstance(2, false)
	start(t, c)
	begun := time.Now()
	testwatch.WaitFor(t, 30*time.Second, "every instance to fire the run-time schedule", func() bool {
		return rec.sawAfter(3, "rt", begun)
	})
	for i := 1; i < 3; i++ {
		if n := rec.handled(i, "code"); n != 0 {
			t.Fatalf("instance %d, which does not define schedule code, fired it %d times", i, n)
		}
	}

	// A run-time change of the code-defined schedule holds until an
	// instance that defines it starts.
	if _, err := b.Put(ctx, "code", "* * * * * *", "code", map[string]string{"from": "put"}, scheduler.Options{Queue: "q"}); err != nil {
		t.Fatal(err)
	}
	i, err := scheduler.Get(ctx, db.Pool, "code")
	if err != nil || i.Runtime || string(i.Args) != `{"from": "put"}` || i.Queue != "q" {
		t.Fatalf("after Put: %+v, %v; want the put definition, still defined in code", i, err)
	}
	changed := time.Now()
	testwatch.WaitFor(t, 30*time.Second, "a fire with the changed args", func() bool {
		js := firedJobs(t, db.Pool, "code")
		return len(js) > 0 && js[len(js)-1].Fire.After(changed) && js[len(js)-1].Args == `{"from": "put"}`
	})
	if _, err := a.Pause(ctx, "code", "ops"); err != nil {
		t.Fatal(err)
	}
	stop(t, a)
	a2 := newInstance(0, true)
	start(t, a2)
	i, err = scheduler.Get(ctx, db.Pool, "code")
	if err != nil || string(i.Args) != `{"from": "code"}` || i.Queue != "default" || !i.Paused || i.PausedBy != "ops" {
		t.Fatalf("after a restart of an instance that defines it: %+v, %v; want the code's definition, still paused", i, err)
	}
	before := len(firedJobs(t, db.Pool, "code"))
	time.Sleep(quietPeriod)
	if js := firedJobs(t, db.Pool, "code"); len(js) != before {
		t.Fatalf("%d jobs of the paused code-defined schedule after the restart", len(js)-before)
	}
	if _, err := a2.Resume(ctx, "code"); err != nil {
		t.Fatal(err)
	}
	resumed := time.Now()
	testwatch.WaitFor(t, 30*time.Second, "a fire with the code's args after the resume", func() bool {
		js := firedJobs(t, db.Pool, "code")
		return len(js) > 0 && js[len(js)-1].Fire.After(resumed) && js[len(js)-1].Args == `{"from": "code"}`
	})
	rec.checkInsertedOnce(t, 3, "rt")
}

func TestPutErrors(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	for _, tt := range []struct {
		name, spec string
		opts       scheduler.Options
		is         error
	}{
		{"bad", "61 * * * *", scheduler.Options{}, scheduler.ErrInvalidSpec},
		{"zone", "0 3 * * *", scheduler.Options{TimeZone: "Mars/Olympus"}, scheduler.ErrUnknownTimeZone},
		{"window", "0 3 * * *", scheduler.Options{CatchUpWindow: scheduler.DefaultRetention}, scheduler.ErrInvalidOptions},
		{"", "0 3 * * *", scheduler.Options{}, scheduler.ErrInvalidOptions},
	} {
		_, err := scheduler.Put(ctx, db.Pool, tt.name, tt.spec, "k", nil, tt.opts)
		var se *scheduler.ScheduleError
		if !errors.As(err, &se) || !errors.Is(err, tt.is) {
			t.Errorf("Put(%q, %q): %v, want a *ScheduleError wrapping %v", tt.name, tt.spec, err, tt.is)
		}
	}
	if is, err := scheduler.List(ctx, db.Pool); err != nil || len(is) != 0 {
		t.Fatalf("after refused Puts: %+v, %v", is, err)
	}
	if _, err := scheduler.Resume(ctx, db.Pool, "none"); !errors.Is(err, scheduler.ErrNotFound) {
		t.Fatalf("Resume of no schedule: %v", err)
	}
	if _, err := scheduler.Get(ctx, db.Pool, "none"); !errors.Is(err, scheduler.ErrNotFound) {
		t.Fatalf("Get of no schedule: %v", err)
	}
}

// TestTriggerCountsForSkipIfRunning: a run enqueued by Trigger that has
// not finished makes the next fire of a SkipIfRunning schedule skipped, as
// a fire's run does; Trigger itself runs whatever SkipIfRunning says.
func TestTriggerCountsForSkipIfRunning(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	client := pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet})
	rec := newRecorder()
	s := scheduler.New(client, scheduler.Config{Logger: quiet, OnFire: rec.onFire(0), SyncInterval: syncInterval})
	if _, err := s.Put(ctx, "rt", "* * * * * *", "rt", nil, scheduler.Options{SkipIfRunning: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Pause(ctx, "rt", "test"); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	f, err := s.Trigger(ctx, "rt")
	if err != nil || !f.Inserted || !f.Triggered {
		t.Fatalf("Trigger of a paused schedule = %+v, %v; want a job", f, err)
	}
	if _, err := s.Resume(ctx, "rt"); err != nil {
		t.Fatal(err)
	}
	testwatch.WaitFor(t, 30*time.Second, "a fire after the resume", func() bool { return len(rec.inserted(0)) > 0 })
	if got := rec.inserted(0)[0]; !got.Skipped {
		t.Fatalf("the fire after the trigger = %+v, want skipped while the triggered run is unfinished", got)
	}
	j, err := client.Get(ctx, f.JobID)
	if err != nil {
		t.Fatal(err)
	}
	if fire, ok := scheduler.FireOf(j); !ok || !fire.Triggered || !fire.At.Equal(f.At) || j.UniqueKey != scheduler.TriggerKey("rt", f.At) {
		t.Fatalf("the triggered job: key %q, FireOf %+v, %v", j.UniqueKey, fire, ok)
	}
}
