package scheduler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue"
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

// waitFor polls cond until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
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

// heldSchedule is a per-second schedule, name, on the queue of the same
// name, started on a schema of its own, whose first fire's job the test
// has claimed and holds.
type heldSchedule struct {
	db     *pgtest.DB
	client *pgqueue.Client
	rec    *recorder
	s      *scheduler.Scheduler
	first  *queue.Job
}

func startHeld(t *testing.T, name string, skip bool) heldSchedule {
	t.Helper()
	h := heldSchedule{db: pgtest.New(t), rec: newRecorder()}
	h.client = pgqueue.New(h.db.Pool, pgqueue.Config{Logger: quiet})
	h.s = scheduler.New(h.client, scheduler.Config{Logger: quiet, OnFire: h.rec.onFire(0)})
	if err := h.s.Add(name, "* * * * * *", name, nil, scheduler.Options{Queue: name, SkipIfRunning: skip}); err != nil {
		t.Fatal(err)
	}
	start(t, h.s)
	waitFor(t, time.Minute, "the first job to be claimed", func() bool {
		got, err := h.client.Claim(context.Background(), queue.ClaimParams{Queue: name, Limit: 1, Lease: time.Hour, WorkerID: "test"})
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 1 {
			h.first = got[0]
		}
		return h.first != nil
	})
	return h
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
	waitFor(t, 2*time.Minute, "every instance to handle the last fire", func() bool { return rec.saw(instances, last) })
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

// TestCatchUpAfterDowntime stops the only instance, and starts another as if
// every instance had been down for five fires: it enqueues exactly the missed
// fires its policy promises.
func TestCatchUpAfterDowntime(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		opts  scheduler.Options
		grace time.Duration
		want  []int // the fires enqueued at start, in seconds after the last enqueued fire
		// The missed fires logged as dropped: the first and last inside the
		// catch-up window and how many, and the first older than the window
		// (0 if none).
		missed []int
		older  int
	}{
		{"skip", scheduler.Options{}, 500 * time.Millisecond, nil, []int{1, 5, 5}, 0},
		{"skip enqueues fires within grace", scheduler.Options{CatchUp: scheduler.CatchUpSkip}, 2 * time.Second, []int{4, 5}, []int{1, 3, 3}, 0},
		{"latest", scheduler.Options{CatchUp: scheduler.CatchUpLatest, CatchUpWindow: time.Minute}, 500 * time.Millisecond, []int{5}, []int{1, 4, 4}, 0},
		{"all", scheduler.Options{CatchUp: scheduler.CatchUpAll, CatchUpWindow: time.Minute}, 500 * time.Millisecond, []int{1, 2, 3, 4, 5}, nil, 0},
		{"all inside the window", scheduler.Options{CatchUp: scheduler.CatchUpAll, CatchUpWindow: 3500 * time.Millisecond}, 500 * time.Millisecond, []int{3, 4, 5}, nil, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := pgtest.New(t)
			rec := newRecorder()
			before := scheduler.New(pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quiet}),
				scheduler.Config{Logger: quiet, OnFire: rec.onFire(0)})
			if err := before.Add("report", "* * * * * *", "report", nil, tt.opts); err != nil {
				t.Fatal(err)
			}
			start(t, before)
			waitFor(t, time.Minute, "two fires", func() bool { return len(rec.inserted(0)) >= 2 })
			stop(t, before)
			ins := rec.inserted(0)
			last := lastFire(t, db.Pool, "report")
			if want := ins[len(ins)-1].At; !last.Equal(want) {
				t.Fatalf("stored last fire %v, want the last inserted fire %v", last, want)
			}
			n := len(jobs(t, db.Pool))

			// Five fires later, one instance starts.
			now := last.Add(5700 * time.Millisecond)
			var logs logbuf.Buffer
			var reported []scheduler.Missed // only the loop writes, before stop returns
			after := scheduler.New(pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quiet}), scheduler.Config{
				Now: func() time.Time { return now }, Grace: tt.grace, Logger: slog.New(slog.NewJSONHandler(&logs, nil)),
				OnMissed: func(m scheduler.Missed) { reported = append(reported, m) },
			})
			if err := after.Add("report", "* * * * * *", "report", nil, tt.opts); err != nil {
				t.Fatal(err)
			}
			start(t, after)
			stop(t, after)

			all := jobs(t, db.Pool)
			var got []int
			for _, j := range all[n:] {
				got = append(got, int(j.At.Sub(last)/time.Second))
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("caught up fires %v, want %v", got, tt.want)
			}
			wantLast := last
			if len(tt.want) > 0 {
				wantLast = last.Add(time.Duration(tt.want[len(tt.want)-1]) * time.Second)
			}
			if got := lastFire(t, db.Pool, "report"); !got.Equal(wantLast) {
				t.Fatalf("stored last fire %v, want %v", got, wantLast)
			}

			sec := func(n int) time.Time { return last.Add(time.Duration(n) * time.Second) }
			var wantLogs []missedLog
			if tt.older != 0 {
				wantLogs = append(wantLogs, missedLog{Msg: "scheduler: missed fires older than the catch-up window not enqueued",
					Schedule: "report", First: sec(tt.older), Until: now.Add(-tt.opts.CatchUpWindow)})
			}
			if tt.missed != nil {
				wantLogs = append(wantLogs, missedLog{Msg: "scheduler: missed fires not enqueued",
					Schedule: "report", Policy: tt.opts.CatchUp.String(), Missed: tt.missed[2], First: sec(tt.missed[0]), Last: sec(tt.missed[1])})
			}
			if got := missedLogs(t, logs.String()); !slices.EqualFunc(got, wantLogs, missedLog.equal) {
				t.Fatalf("logged missed fires %+v, want %+v\n%s", got, wantLogs, logs.String())
			}
			// OnMissed reports what was logged, counting the older fires too.
			wantFires := 0
			if tt.missed != nil {
				wantFires = tt.missed[2]
			}
			if tt.older != 0 {
				for k := tt.older; !sec(k).After(now.Add(-tt.opts.CatchUpWindow)); k++ {
					wantFires++
				}
			}
			gotFires := 0
			for _, m := range reported {
				if m.Schedule != "report" || m.Fires < 1 || m.Last.Before(m.First) {
					t.Errorf("OnMissed got %+v", m)
				}
				gotFires += m.Fires
			}
			if len(reported) != len(wantLogs) || gotFires != wantFires {
				t.Errorf("OnMissed reported %+v (%d fires); want %d reports of %d fires", reported, gotFires, len(wantLogs), wantFires)
			}
		})
	}
}

// missedLog is a log line about missed fires.
type missedLog struct {
	Msg, Level, Schedule, Policy string
	Missed                       int
	First, Last, Until           time.Time
}

func (a missedLog) equal(b missedLog) bool {
	return a.Msg == b.Msg && a.Schedule == b.Schedule && a.Policy == b.Policy && a.Missed == b.Missed &&
		a.First.Equal(b.First) && a.Last.Equal(b.Last) && a.Until.Equal(b.Until)
}

// missedLogs returns the warnings about missed fires in JSON logs.
func missedLogs(t *testing.T, logs string) []missedLog {
	t.Helper()
	var out []missedLog
	for line := range strings.Lines(logs) {
		var l missedLog
		if err := json.Unmarshal([]byte(line), &l); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		if strings.Contains(l.Msg, "missed") {
			if l.Level != "WARN" {
				t.Errorf("%q logged at %s, want WARN", l.Msg, l.Level)
			}
			out = append(out, l)
		}
	}
	return out
}

// TestKilledAfterInsertLosesNothing kills the only instance right after its
// second insert commits, before its next tick; an instance started later
// carries on from the stored last fire: every fire is one job.
func TestKilledAfterInsertLosesNothing(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	runCtx, kill := context.WithCancel(context.Background())
	defer kill()
	poolA := db.NewPool(t, 4)
	var (
		mu        sync.Mutex
		insertedA []time.Time
	)
	a := scheduler.New(pgqueue.New(poolA, pgqueue.Config{Logger: quiet}), scheduler.Config{
		Logger: quiet,
		OnFire: func(f scheduler.Fire) {
			mu.Lock()
			defer mu.Unlock()
			if f.Inserted {
				insertedA = append(insertedA, f.At)
				if len(insertedA) == 2 {
					kill()
				}
			}
		},
	})
	if err := a.Add("sync", "* * * * * *", "sync", nil, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(runCtx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-runCtx.Done():
	case <-time.After(time.Minute):
		t.Fatal("instance A inserted no two fires in a minute")
	}
	poolA.Close()
	mu.Lock()
	killedAfter := insertedA[len(insertedA)-1]
	mu.Unlock()
	if got := lastFire(t, db.Pool, "sync"); !got.Equal(killedAfter) {
		t.Fatalf("stored last fire %v, want A's last insert %v", got, killedAfter)
	}

	// B starts two fires later.
	time.Sleep(time.Until(killedAfter.Add(2500 * time.Millisecond)))
	rec := newRecorder()
	b := scheduler.New(pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quiet}),
		scheduler.Config{Logger: quiet, OnFire: rec.onFire(0)})
	if err := b.Add("sync", "* * * * * *", "sync", nil, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	start(t, b)
	waitFor(t, time.Minute, "B to insert four fires", func() bool { return len(rec.inserted(0)) >= 4 })
	stop(t, b)

	all := jobs(t, db.Pool)
	checkOnePerFire(t, "sync", all)
	insB := rec.inserted(0)
	if len(all) != len(insertedA)+len(insB) {
		t.Fatalf("%d jobs, but A inserted %d and B %d", len(all), len(insertedA), len(insB))
	}
	if !insB[0].At.Equal(killedAfter.Add(time.Second)) {
		t.Fatalf("B's first insert is the fire at %v, want the one after A's last (%v)", insB[0].At, killedAfter.Add(time.Second))
	}
}

// TestSkipIfRunning holds the first fire's job running and shows which
// later fires run: all of them by default, none while it runs with
// SkipIfRunning (each skipped fire is a cancelled job saying why).
func TestSkipIfRunning(t *testing.T) {
	t.Parallel()
	for _, skip := range []bool{false, true} {
		t.Run(fmt.Sprintf("SkipIfRunning=%v", skip), func(t *testing.T) {
			t.Parallel()
			h := startHeld(t, "slow", skip)
			db, client, rec, s, running := h.db, h.client, h.rec, h.s, h.first
			ctx := context.Background()
			waitFor(t, time.Minute, "three fires while the first job runs", func() bool {
				return rec.insertedAfter(0, running.ScheduledAt) >= 3
			})
			if err := client.Complete(ctx, running.Lease()); err != nil {
				t.Fatal(err)
			}
			completed := time.Now()
			waitFor(t, time.Minute, "two fires after the first job completed", func() bool {
				return rec.insertedAfter(0, completed) >= 2
			})
			stop(t, s)

			all := jobs(t, db.Pool)
			checkOnePerFire(t, "slow", all)
			reason := fmt.Sprintf("skipped: job %d of an earlier fire of schedule \"slow\" has not finished (SkipIfRunning)", running.ID)
			var afterCompletion int
			for _, j := range all {
				if !j.At.After(running.ScheduledAt) {
					continue
				}
				wantSkipped := skip
				if j.At.After(completed) {
					afterCompletion++
					// The first fire after completion runs; it waits
					// unclaimed, so it is unfinished and skips the next.
					wantSkipped = skip && afterCompletion > 1
				}
				switch {
				case !wantSkipped && j.State == "cancelled":
					t.Errorf("fire %v was skipped (%s), want it enqueued", j.At, j.Error)
				case wantSkipped && j.State != "cancelled":
					t.Errorf("fire %v is %s, want it skipped while job %d runs", j.At, j.State, running.ID)
				case wantSkipped && j.At.Before(completed) && j.Error != reason:
					t.Errorf("fire %v error %q, want %q", j.At, j.Error, reason)
				}
			}
			for _, f := range rec.inserted(0) {
				if f.Skipped != (lookup(all, f.At).State == "cancelled") {
					t.Errorf("fire %v reported Skipped=%v but its job is %s", f.At, f.Skipped, lookup(all, f.At).State)
				}
			}
		})
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

// TestChangedDefinitionLastWriterWins registers a name, then registers it
// again with another spec and zone: the stored row shows the later one, and
// the change is logged.
func TestChangedDefinitionLastWriterWins(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	var logs logbuf.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	register := func(spec string, opts scheduler.Options) {
		t.Helper()
		s := scheduler.New(pgqueue.New(db.NewPool(t, 2), pgqueue.Config{Logger: quiet}), scheduler.Config{Logger: logger})
		if err := s.Add("report", spec, "report", nil, opts); err != nil {
			t.Fatal(err)
		}
		start(t, s)
		stop(t, s)
	}
	register("0 * * * *", scheduler.Options{})
	first, err := scheduler.List(context.Background(), db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	register("30 9 * * *", scheduler.Options{TimeZone: "Europe/Paris", CatchUp: scheduler.CatchUpLatest})
	second, err := scheduler.List(context.Background(), db.Pool)
	if err != nil {
		t.Fatal(err)
	}
	register("30 9 * * *", scheduler.Options{TimeZone: "Europe/Paris", CatchUp: scheduler.CatchUpLatest})
	third, err := scheduler.List(context.Background(), db.Pool)
	if err != nil {
		t.Fatal(err)
	}

	if len(first) != 1 || first[0].Spec != "0 * * * *" || first[0].TimeZone != "UTC" || first[0].CatchUp != "skip" {
		t.Fatalf("after the first registration: %+v", first)
	}
	got := second[0]
	if len(second) != 1 || got.Name != "report" || got.Spec != "30 9 * * *" || got.TimeZone != "Europe/Paris" ||
		got.CatchUp != "latest" || got.Kind != "report" || got.Queue != queue.DefaultQueue {
		t.Fatalf("after the second registration: %+v", second)
	}
	if !got.UpdatedAt.After(first[0].UpdatedAt) || !got.CreatedAt.Equal(first[0].CreatedAt) {
		t.Errorf("updated_at %v (was %v), created_at %v (was %v): want updated_at moved and created_at kept",
			got.UpdatedAt, first[0].UpdatedAt, got.CreatedAt, first[0].CreatedAt)
	}
	if loc, _ := time.LoadLocation("Europe/Paris"); got.NextFire.In(loc).Hour() != 9 || got.NextFire.In(loc).Minute() != 30 {
		t.Errorf("next fire %v, want 09:30 in Europe/Paris", got.NextFire)
	}
	if !third[0].UpdatedAt.Equal(got.UpdatedAt) {
		t.Errorf("registering the same definition moved updated_at from %v to %v", got.UpdatedAt, third[0].UpdatedAt)
	}
	out := logs.String()
	if n := strings.Count(out, "schedule definition changed"); n != 1 {
		t.Fatalf("logged %d changes, want 1:\n%s", n, out)
	}
	for _, want := range []string{`old_spec="0 * * * *"`, `spec="30 9 * * *"`, `old_time_zone=UTC`, `time_zone=Europe/Paris`, `old_catch_up=skip`, `catch_up=latest`} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %s:\n%s", want, out)
		}
	}
}

func TestAddErrors(t *testing.T) {
	t.Parallel()
	s := scheduler.New(pgqueue.New(nil, pgqueue.Config{}), scheduler.Config{Retention: time.Hour})
	if err := s.Add("nightly", "0 3 * * *", "report", nil, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, spec, kind string
		args             any
		opts             scheduler.Options
		is               error
		want             string
	}{
		{"bad", "61 * * * *", "k", nil, scheduler.Options{}, scheduler.ErrInvalidSpec,
			`scheduler: schedule "bad" spec "61 * * * *": invalid cron spec: end of range (61) above maximum (59): 61`},
		{"short", "* * *", "k", nil, scheduler.Options{}, scheduler.ErrInvalidSpec,
			`scheduler: schedule "short" spec "* * *": invalid cron spec: expected 5 to 6 fields, found 3: [* * *]`},
		{"feb30", "0 0 30 2 *", "k", nil, scheduler.Options{}, scheduler.ErrInvalidSpec,
			`scheduler: schedule "feb30" spec "0 0 30 2 *": invalid cron spec: it never fires`},
		{"mars", "CRON_TZ=Mars/Olympus 0 3 * * *", "k", nil, scheduler.Options{}, scheduler.ErrUnknownTimeZone,
			`scheduler: schedule "mars" spec "CRON_TZ=Mars/Olympus 0 3 * * *": unknown time zone "Mars/Olympus"`},
		{"mars2", "0 3 * * *", "k", nil, scheduler.Options{TimeZone: "Mars/Olympus"}, scheduler.ErrUnknownTimeZone,
			`scheduler: schedule "mars2" spec "0 3 * * *": unknown time zone "Mars/Olympus"`},
		{"nightly", "0 4 * * *", "report", nil, scheduler.Options{}, scheduler.ErrDuplicateName,
			`scheduler: schedule "nightly" spec "0 4 * * *": schedule name already added`},
		{"", "0 4 * * *", "k", nil, scheduler.Options{}, scheduler.ErrInvalidOptions,
			`scheduler: schedule "" spec "0 4 * * *": invalid options: the name is empty`},
		{"nokind", "0 4 * * *", "", nil, scheduler.Options{}, scheduler.ErrInvalidOptions,
			`scheduler: schedule "nokind" spec "0 4 * * *": invalid options: jobfence: invalid enqueue params: Kind is empty`},
		{"prio", "0 4 * * *", "k", nil, scheduler.Options{Priority: 9}, scheduler.ErrInvalidOptions,
			`scheduler: schedule "prio" spec "0 4 * * *": invalid options: jobfence: invalid enqueue params: Priority must be between 1 and 4`},
		{"args", "0 4 * * *", "k", make(chan int), scheduler.Options{}, scheduler.ErrInvalidOptions,
			`scheduler: schedule "args" spec "0 4 * * *": invalid options: encode args: json: unsupported type: chan int`},
		{"window", "0 4 * * *", "k", nil, scheduler.Options{CatchUp: scheduler.CatchUpAll, CatchUpWindow: time.Hour}, scheduler.ErrInvalidOptions,
			`scheduler: schedule "window" spec "0 4 * * *": invalid options: CatchUpWindow 1h0m0s is not shorter than the job retention 1h0m0s: a fire older than the retention may have been pruned and would run twice`},
		{"negwindow", "0 4 * * *", "k", nil, scheduler.Options{CatchUpWindow: -time.Second}, scheduler.ErrInvalidOptions,
			`scheduler: schedule "negwindow" spec "0 4 * * *": invalid options: CatchUpWindow -1s is negative`},
		{"policy", "0 4 * * *", "k", nil, scheduler.Options{CatchUp: 9}, scheduler.ErrInvalidOptions,
			`scheduler: schedule "policy" spec "0 4 * * *": invalid options: unknown catch-up policy 9`},
	}
	for _, tt := range tests {
		err := s.Add(tt.name, tt.spec, tt.kind, tt.args, tt.opts)
		var se *scheduler.ScheduleError
		if !errors.As(err, &se) || se.Name != tt.name || se.Spec != tt.spec {
			t.Errorf("Add(%q, %q): %v, want a *ScheduleError naming them", tt.name, tt.spec, err)
			continue
		}
		if !errors.Is(err, tt.is) || err.Error() != tt.want {
			t.Errorf("Add(%q, %q):\n got %v\nwant %s (wrapping %v)", tt.name, tt.spec, err, tt.want, tt.is)
		}
	}
}

func TestStartStopMisuse(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	s := scheduler.New(pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet}), scheduler.Config{Logger: quiet})
	if err := s.Stop(context.Background()); !errors.Is(err, scheduler.ErrNotStarted) {
		t.Fatalf("Stop before Start: %v, want ErrNotStarted", err)
	}
	if err := s.Add("a", "@hourly", "a", nil, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	start(t, s)
	if err := s.Start(context.Background()); !errors.Is(err, scheduler.ErrStarted) {
		t.Fatalf("second Start: %v, want ErrStarted", err)
	}
	err := s.Add("b", "@hourly", "b", nil, scheduler.Options{})
	if !errors.Is(err, scheduler.ErrStarted) || err.Error() != `scheduler: schedule "b" spec "@hourly": scheduler: already started` {
		t.Fatalf("Add after Start: %v", err)
	}
	stop(t, s)
}

// TestStartWithoutSchema shows the error a service sees when jobfence's
// migrations were not applied: which schema lacks the tables and what to
// run, at once. Missing tables are not a reason to wait, as an unreachable
// database is.
func TestStartWithoutSchema(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	var logs logbuf.Buffer
	s := scheduler.New(pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet}), scheduler.Config{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err := s.Add("a", "@hourly", "a", nil, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	err := s.Start(context.Background())
	var nm *migrations.NotMigratedError
	want := fmt.Sprintf("scheduler: start: jobfence's tables are missing in schema %q", db.Schema)
	if !errors.As(err, &nm) || !errors.Is(err, migrations.ErrNotMigrated) || !errors.Is(err, queue.ErrNotSetUp) || nm.Schema != db.Schema ||
		!strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "run `jobfence migrate up`") {
		t.Fatalf("Start without migrations = %v\nwant a *migrations.NotMigratedError starting %q and naming jobfence migrate up", err, want)
	}
	if strings.Contains(logs.String(), msgStartRetry) {
		t.Fatalf("Start retried a missing table: %s", logs.String())
	}
	if err := s.Stop(context.Background()); !errors.Is(err, scheduler.ErrNotStarted) {
		t.Fatalf("Stop after a failed Start: %v, want ErrNotStarted", err)
	}
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
	waitFor(t, time.Minute, "a fire", func() bool { return len(rec.inserted(0)) >= 1 })
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

// TestSkipIfRunningAfterRescheduled moves the first fire's job past later
// fires, as a retry or a snooze does: it is still an earlier fire, so every
// later fire is skipped while it waits.
func TestSkipIfRunningAfterRescheduled(t *testing.T) {
	t.Parallel()
	for _, outcome := range []queue.Outcome{queue.OutcomeRetry, queue.OutcomeSnooze} {
		t.Run(outcome.String(), func(t *testing.T) {
			t.Parallel()
			h := startHeld(t, "flaky", true)
			db, client, rec, s, first := h.db, h.client, h.rec, h.s, h.first
			ctx := context.Background()
			stale, err := client.Finish(ctx, []queue.Finish{{
				Lease: first.Lease(), Outcome: outcome, Delay: time.Hour,
				Error: &queue.AttemptError{Attempt: first.Attempt, At: time.Now(), Error: "boom"},
			}})
			if err != nil || len(stale) != 0 {
				t.Fatalf("Finish: stale %v, %v", stale, err)
			}
			finished := time.Now()
			waitFor(t, time.Minute, "three fires after the first job was rescheduled", func() bool {
				return rec.insertedAfter(0, finished) >= 3
			})
			stop(t, s)

			j, err := client.Get(ctx, first.ID)
			if err != nil {
				t.Fatal(err)
			}
			if j.State.Final() || !j.ScheduledAt.After(finished) {
				t.Fatalf("first job is %s at %v, want it waiting an hour", j.State, j.ScheduledAt)
			}
			// The first job's scheduled_at moved: the others are one per fire.
			all := slices.DeleteFunc(jobs(t, db.Pool), func(j storedJob) bool { return j.Key == first.UniqueKey })
			checkOnePerFire(t, "flaky", all)
			reason := fmt.Sprintf("skipped: job %d of an earlier fire of schedule \"flaky\" has not finished (SkipIfRunning)", first.ID)
			for _, f := range rec.inserted(0) {
				if !f.At.After(first.ScheduledAt) {
					continue
				}
				got := lookup(all, f.At)
				if !f.Skipped || got.State != "cancelled" || got.Error != reason {
					t.Errorf("fire %v: Skipped=%v, job %s with error %q; want it skipped with %q", f.At, f.Skipped, got.State, got.Error, reason)
				}
			}
		})
	}
}

// TestSlowScheduleDelaysNoOther holds a lock that one schedule's enqueue
// needs for several grace periods: the other schedule's fires that came due
// meanwhile are late but were never missed, so every one is enqueued, and
// so are the slow schedule's own.
func TestSlowScheduleDelaysNoOther(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	const grace = 2 * time.Second
	var logs logbuf.Buffer
	rec := newRecorder()
	s := scheduler.New(pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quiet}), scheduler.Config{
		Grace: grace, Logger: slog.New(slog.NewTextHandler(&logs, nil)), OnFire: rec.onFire(0),
	})
	tx := startSlowAndOther(t, db, s)
	ctx := context.Background()
	blocked := time.Now()
	// Several fires of "other" come due and pass their grace.
	time.Sleep(3 * grace)
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	released := time.Now()
	waitFor(t, time.Minute, "both schedules to insert two fires after the lock was released", func() bool {
		r := rec.inserted(0)
		return slices.ContainsFunc(r, func(f scheduler.Fire) bool { return f.Schedule == "slow" && f.At.After(released.Add(time.Second)) }) &&
			slices.ContainsFunc(r, func(f scheduler.Fire) bool { return f.Schedule == "other" && f.At.After(released.Add(time.Second)) })
	})
	stop(t, s)

	all := jobs(t, db.Pool)
	for _, name := range []string{"slow", "other"} {
		mine := slices.DeleteFunc(slices.Clone(all), func(j storedJob) bool { return !strings.HasPrefix(j.Key, "cron:"+name+":") })
		checkOnePerFire(t, name, mine)
		if !mine[0].At.Before(blocked) || !mine[len(mine)-1].At.After(released) {
			t.Fatalf("%s's jobs run from %v to %v, not across the lock held from %v to %v", name, mine[0].At, mine[len(mine)-1].At, blocked, released)
		}
	}
	if out := logs.String(); strings.Contains(out, "missed") {
		t.Fatalf("fires were reported missed:\n%s", out)
	}
}

// TestStopDuringSlowEnqueue calls Stop while one schedule's enqueue waits for
// a lock, and Add and Start concurrently: Stop lets that fire commit but
// enqueues no other schedule's, Add and Start say the Scheduler is stopping
// until Stop returns, and then it starts again. Run with -race, it also
// shows that the restarted loop shares no state with the old one.
func TestStopDuringSlowEnqueue(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	rec := newRecorder()
	s := scheduler.New(pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quiet}), scheduler.Config{
		Logger: quiet, OnFire: rec.onFire(0),
	})
	tx := startSlowAndOther(t, db, s)
	ctx := context.Background()

	stopped := make(chan error, 1)
	go func() { stopped <- s.Stop(ctx) }()
	waitFor(t, time.Minute, "Stop to begin", func() bool {
		return errors.Is(s.Add("late", "@hourly", "late", nil, scheduler.Options{}), scheduler.ErrStopping)
	})
	wantAdd := `scheduler: schedule "late" spec "@hourly": scheduler: stopping`
	if err := s.Add("late", "@hourly", "late", nil, scheduler.Options{}); err == nil || err.Error() != wantAdd {
		t.Fatalf("Add while stopping: %v, want %s", err, wantAdd)
	}
	if err := s.Start(ctx); !errors.Is(err, scheduler.ErrStopping) || err.Error() != "scheduler: stopping" {
		t.Fatalf("Start while stopping: %v, want ErrStopping", err)
	}
	if err := s.Stop(ctx); !errors.Is(err, scheduler.ErrStopping) {
		t.Fatalf("second Stop while stopping: %v, want ErrStopping", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-stopped:
		if err != nil {
			t.Fatalf("Stop: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Stop did not return in a minute after the lock was released")
	}

	all := jobs(t, db.Pool)
	var lastSlow, lastOther time.Time
	for _, j := range all {
		switch {
		case strings.HasPrefix(j.Key, "cron:slow:"):
			lastSlow = later(lastSlow, j.At)
		case strings.HasPrefix(j.Key, "cron:other:"):
			lastOther = later(lastOther, j.At)
		}
	}
	// The fire "slow" was enqueuing when Stop began committed; "other"'s
	// same fire was not enqueued.
	if lastSlow.IsZero() || !lastOther.Before(lastSlow) {
		t.Fatalf(`after Stop, the last fire of "slow" is %v and of "other" %v: want "other" to stop before "slow"'s last fire`, lastSlow, lastOther)
	}

	// Stopped, the Scheduler starts again and enqueues the next fires.
	restarted := time.Now()
	start(t, s)
	waitFor(t, time.Minute, "a fire after the restart", func() bool {
		return slices.ContainsFunc(rec.inserted(0), func(f scheduler.Fire) bool { return f.Schedule == "other" && f.At.After(restarted) })
	})
	stop(t, s)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// holdScheduleRow locks schedule name's row in a transaction of its own and
// returns once an enqueue of that schedule waits for it (recording a fire
// updates the row). The transaction is rolled back when the test ends, if
// the test has not done so.
// startSlowAndOther adds two per-second schedules to s, "slow" (which the
// loop handles first in each tick) and "other", starts s, and holds slow's
// row so that its enqueues wait until the returned transaction ends.
func startSlowAndOther(t *testing.T, db *pgtest.DB, s *scheduler.Scheduler) pgx.Tx {
	t.Helper()
	for _, name := range []string{"slow", "other"} {
		if err := s.Add(name, "* * * * * *", name, nil, scheduler.Options{}); err != nil {
			t.Fatal(err)
		}
	}
	start(t, s)
	return holdScheduleRow(t, db, "slow")
}

func holdScheduleRow(t *testing.T, db *pgtest.DB, name string) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	var holder int
	if err := tx.QueryRow(ctx, `SELECT pg_backend_pid() FROM jobfence_schedules WHERE name = $1 FOR UPDATE`, name).Scan(&holder); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "an enqueue of "+name+" to wait for the lock", func() bool {
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))`, holder).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	return tx
}
