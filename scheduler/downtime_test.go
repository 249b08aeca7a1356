package scheduler_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

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
			testwatch.WaitFor(t, time.Minute, "two fires", func() bool { return len(rec.inserted(0)) >= 2 })
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
	testwatch.WaitFor(t, time.Minute, "B to insert four fires", func() bool { return len(rec.inserted(0)) >= 4 })
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
