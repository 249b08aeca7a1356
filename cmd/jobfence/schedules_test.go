package main

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

func TestSchedulesList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	quiet := slog.New(slog.DiscardHandler)
	list := func() (string, string, int) {
		var out, errb bytes.Buffer
		code := run(ctx, []string{"schedules", "list", "--database-url", db.URL}, &out, &errb)
		return out.String(), errb.String(), code
	}
	if out, errs, code := list(); code != 0 || out != "no schedules registered\n" {
		t.Fatalf("empty table: code %d, stdout %q, stderr %q", code, out, errs)
	}

	fired := make(chan scheduler.Fire, 100)
	s := scheduler.New(pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet}), scheduler.Config{
		Logger: quiet,
		OnFire: func(f scheduler.Fire) { fired <- f },
	})
	if err := s.Add("nightly-report", "0 3 * * *", "report", nil, scheduler.Options{TimeZone: "Europe/Paris"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Add("heartbeat", "* * * * * *", "heartbeat", nil, scheduler.Options{}); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	var last scheduler.Fire
	select {
	case last = <-fired:
	case <-time.After(time.Minute):
		t.Fatal("no fire in a minute")
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	for len(fired) > 0 {
		last = <-fired
	}

	out, errs, code := list()
	if code != 0 {
		t.Fatalf("code %d, stderr %q", code, errs)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 {
		t.Fatalf("want a header and two rows:\n%s", out)
	}
	fields := func(line string) []string { return strings.Split(strings.Join(strings.Fields(line), " "), " ") }
	if got := strings.Join(fields(lines[0]), " "); got != "NAME SPEC TIME ZONE KIND STATUS NEXT FIRE LAST ENQUEUED UPDATED" {
		t.Errorf("header %q", got)
	}
	nightly, err := scheduler.ParseSpec("0 3 * * *", "Europe/Paris")
	if err != nil {
		t.Fatal(err)
	}
	// Rows are sorted by name; columns are padded, so compare their words.
	// The nightly row's next fire is the one after registration, which
	// happened between before and after.
	want := [][]string{
		{"heartbeat * * * * * * UTC heartbeat active " + formatTime(last.At.Add(time.Second)) + " " + formatTime(last.At)},
		{"nightly-report 0 3 * * * Europe/Paris report active " + formatTime(nightly.Next(before)) + " -",
			"nightly-report 0 3 * * * Europe/Paris report active " + formatTime(nightly.Next(after)) + " -"},
	}
	for i, ws := range want {
		got := strings.Join(fields(lines[i+1]), " ")
		if !strings.HasPrefix(got, ws[0]+" ") && !strings.HasPrefix(got, ws[len(ws)-1]+" ") {
			t.Errorf("row %d:\n got %q\nwant %q followed by updated_at", i, got, ws[0])
		}
	}

	// A schedule no instance registers any more can be deleted; its jobs stay.
	var jobs int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs`).Scan(&jobs); err != nil || jobs == 0 {
		t.Fatalf("jobs of the fires: %d, %v", jobs, err)
	}
	var outb, errb bytes.Buffer
	if code := run(ctx, []string{"schedules", "delete", "heartbeat", "--database-url", db.URL}, &outb, &errb); code != 0 ||
		outb.String() != "deleted schedule \"heartbeat\"; the jobs of its fires are kept\n"+
			"note: \"heartbeat\" is defined in code: it comes back when an instance that defines it starts; remove it from the code, or pause it instead\n" {
		t.Fatalf("delete: code %d, stdout %q, stderr %q", code, outb.String(), errb.String())
	}
	out, _, _ = list()
	if lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[1], "nightly-report ") {
		t.Fatalf("after delete, want the header and nightly-report:\n%s", out)
	}
	var kept int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs`).Scan(&kept); err != nil || kept != jobs {
		t.Fatalf("jobs after delete: %d, %v; want the %d there were", kept, err, jobs)
	}
	errb.Reset()
	if code := run(ctx, []string{"schedules", "delete", "heartbeat", "--database-url", db.URL}, &outb, &errb); code != 1 ||
		!strings.Contains(errb.String(), `no schedule named "heartbeat"`) {
		t.Fatalf("second delete: code %d, stderr %q; want 1 and no schedule named", code, errb.String())
	}
}

func TestSchedulesErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"schedules", "list", "--database-url", ""}, "jobfence schedules: no database: pass --database-url or set DATABASE_URL\n"},
		{[]string{"schedules", "--database-url", "postgres://x", "show"}, "jobfence schedules: unknown schedules action \"show\": want list, add NAME SPEC KIND, pause NAME, resume NAME, delete NAME or trigger NAME\n"},
		{[]string{"schedules", "add", "x", "* * * * *", "--database-url", "postgres://x"}, "jobfence schedules: add wants the schedule's name, its spec (quoted: \"0 3 * * *\") and the jobs' kind\n"},
		{[]string{"schedules", "add", "x", "* * * * *", "k", "--args", "{", "--database-url", "postgres://x"}, "jobfence schedules: --args is not valid JSON: {\n"},
		{[]string{"schedules", "add", "x", "* * * * *", "k", "--catch-up", "some", "--database-url", "postgres://x"}, "jobfence schedules: --catch-up: invalid options: unknown catch-up policy \"some\": want skip, latest or all\n"},
		{[]string{"schedules", "pause", "x", "--queue", "q", "--database-url", "postgres://x"}, "jobfence schedules: --queue applies to add, not pause\n"},
		{[]string{"schedules", "resume", "x", "--by", "me", "--database-url", "postgres://x"}, "jobfence schedules: --by applies to pause, not resume\n"},
		{[]string{"schedules", "trigger", "--database-url", "postgres://x"}, "jobfence schedules: trigger wants the schedule's name\n"},
		{[]string{"schedules", "trigger", "a", "b", "--database-url", "postgres://x"}, "jobfence schedules: unexpected arguments after trigger: [\"b\"]\n"},
		{[]string{"schedules", "delete", "--database-url", "postgres://x"}, "jobfence schedules: delete wants the schedule's name\n"},
		{[]string{"schedules", "list", "extra"}, "jobfence schedules: unexpected arguments after list: [\"extra\"]\n"},
	}
	for _, tt := range tests {
		var out, errb bytes.Buffer
		if code := run(context.Background(), tt.args, &out, &errb); code != 1 || !strings.HasSuffix(errb.String(), tt.want) {
			t.Errorf("run(%q) = %d, stderr %q, want 1 and %q", tt.args, code, errb.String(), tt.want)
		}
	}
}
