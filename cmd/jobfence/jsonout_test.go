package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

// runJSON runs the CLI and decodes its stdout into v, failing t unless it
// exits 0 with nothing but JSON on stdout.
func runJSON(t *testing.T, v any, args ...string) {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(context.Background(), args, &out, &errb); code != 0 {
		t.Fatalf("jobfence %v: exit %d, stderr %q", args, code, errb.String())
	}
	dec := json.NewDecoder(&out)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("jobfence %v: stdout is not the JSON expected: %v\n%s", args, err, out.String())
	}
}

func TestJobsJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	var empty []jobJSON
	runJSON(t, &empty, "jobs", "list", "--json", "--database-url", db.URL)
	if empty == nil || len(empty) != 0 {
		t.Fatalf("no jobs: got %#v, want an empty array", empty)
	}
	res, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "invoice", Args: []byte(`{"id":7}`), Queue: "billing", UniqueKey: "inv:7"})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cancel(ctx, res.ID); err != nil {
		t.Fatal(err)
	}
	var list []jobJSON
	runJSON(t, &list, "jobs", "--json", "list", "--queue", "billing", "--database-url", db.URL)
	if len(list) != 1 || list[0].ID != res.ID || list[0].Kind != "invoice" || list[0].State != "cancelled" ||
		list[0].UniqueKey != "inv:7" || list[0].ScheduledAt == nil || list[0].AttemptedAt != nil {
		t.Fatalf("list: %+v", list)
	}
	var args struct{ ID int }
	if err := json.Unmarshal(list[0].Args, &args); err != nil || args.ID != 7 {
		t.Fatalf("args %s: %v; want the job's args as JSON", list[0].Args, err)
	}
	var one jobJSON
	runJSON(t, &one, "jobs", "show", fmt.Sprint(res.ID), "--json", "--database-url", db.URL)
	if one.ID != res.ID || len(one.Errors) != 1 || one.Errors[0].Error != "cancelled by request" || one.Errors[0].At == nil {
		t.Fatalf("show: %+v", one)
	}

	var out, errb bytes.Buffer
	if code := run(ctx, []string{"jobs", "cancel", "1", "--json", "--database-url", db.URL}, &out, &errb); code != 1 ||
		!strings.Contains(errb.String(), "--json applies to list and show, not cancel") {
		t.Fatalf("jobs cancel --json: exit %d, stderr %q", code, errb.String())
	}
}

func TestSchedulesAndMigrateJSON(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	var none []scheduleJSON
	runJSON(t, &none, "schedules", "list", "--json", "--database-url", db.URL)
	if none == nil || len(none) != 0 {
		t.Fatalf("no schedules: got %#v, want an empty array", none)
	}
	quiet := slog.New(slog.DiscardHandler)
	s := scheduler.New(pgqueue.New(db.Pool, pgqueue.Config{Logger: quiet}), scheduler.Config{Logger: quiet})
	if err := s.Add("nightly-report", "0 3 * * *", "report", nil, scheduler.Options{TimeZone: "Europe/Paris"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	var list []scheduleJSON
	runJSON(t, &list, "schedules", "list", "--json", "--database-url", db.URL)
	if len(list) != 1 || list[0].Name != "nightly-report" || list[0].TimeZone != "Europe/Paris" || list[0].NextFire == nil || list[0].LastFire != nil {
		t.Fatalf("schedules: %+v", list)
	}

	var migs []migrationJSON
	runJSON(t, &migs, "migrate", "status", "--json", "--database-url", db.URL)
	if len(migs) == 0 || migs[0].Version != 1 || migs[0].AppliedAt == nil {
		t.Fatalf("migrate status: %+v", migs)
	}

	for _, args := range [][]string{
		{"schedules", "delete", "x", "--json"},
		{"migrate", "up", "--json"},
	} {
		var out, errb bytes.Buffer
		if code := run(ctx, append(args, "--database-url", db.URL), &out, &errb); code != 1 || !strings.Contains(errb.String(), "--json applies to") {
			t.Fatalf("jobfence %v: exit %d, stderr %q", args, code, errb.String())
		}
	}
}
