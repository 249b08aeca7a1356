package scheduler_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/migrations"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

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
