package main

import (
	"bytes"
	"context"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

// TestSchedulesRuntimeCommands changes a schedule from the command line
// while two scheduler instances run: add (both fire it, one job per fire),
// add again without --replace (refused), pause (nothing enqueued), list
// (paused, by whom), resume (fires again), trigger twice (one job), delete
// (no more fires), and the not-found errors.
func TestSchedulesRuntimeCommands(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := pgtest.New(t)
	cli := func(args ...string) (string, string, int) {
		t.Helper()
		var out, errb bytes.Buffer
		code := run(ctx, append(args, "--database-url", db.URL), &out, &errb)
		return out.String(), errb.String(), code
	}
	mustRun := func(want string, args ...string) string {
		t.Helper()
		out, errs, code := cli(args...)
		if code != 0 || !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("jobfence %q: code %d, stdout %q, stderr %q; want stdout matching %q", args, code, out, errs, want)
		}
		return out
	}
	jobsOf := func() int {
		t.Helper()
		var n int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs WHERE starts_with(unique_key, 'cron:rt:')`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	quiet := slog.New(slog.DiscardHandler)
	for range 2 {
		s := scheduler.New(pgqueue.New(db.NewPool(t, 4), pgqueue.Config{Logger: quiet}), scheduler.Config{
			Logger: quiet, SyncInterval: 200 * time.Millisecond,
		})
		if err := s.Start(ctx); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
	}

	mustRun(`^added schedule "rt" \(\* \* \* \* \* \*, kind rt, queue q1\): every instance picks it up within a few seconds; next fire \d{4}-`,
		"schedules", "add", "rt", "* * * * * *", "rt", "--args", `{"v": 1}`, "--queue", "q1", "--catch-up", "latest")
	testwatch.WaitFor(t, 30*time.Second, "two fires of the added schedule", func() bool { return jobsOf() >= 2 })
	var dup int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) - count(DISTINCT unique_key) FROM jobfence_jobs`).Scan(&dup); err != nil || dup != 0 {
		t.Fatalf("%d fires with more than one job (%v)", dup, err)
	}
	var args, q string
	if err := db.Pool.QueryRow(ctx, `SELECT args::text, queue FROM jobfence_jobs ORDER BY id LIMIT 1`).Scan(&args, &q); err != nil ||
		args != `{"v": 1}` || q != "q1" {
		t.Fatalf("the job of a fire: args %s, queue %s (%v)", args, q, err)
	}
	if _, errs, code := cli("schedules", "add", "rt", "@hourly", "other"); code != 1 ||
		!strings.Contains(errs, `schedule "rt" exists (added at run time, spec "* * * * * *", kind rt): pass --replace to change its definition`) {
		t.Fatalf("add of an existing name: code %d, stderr %q", code, errs)
	}

	mustRun(`^schedule "rt" paused by ops: no instance enqueues its fires until it is resumed\n$`, "schedules", "pause", "rt", "--by", "ops")
	paused := jobsOf()
	mustRun(`^schedule "rt" was already paused, since .* by ops; nothing changed\n$`, "schedules", "pause", "rt")
	list := mustRun(`rt `, "schedules", "list")
	if !regexp.MustCompile(`(?m)^rt\s+\* \* \* \* \* \*\s+UTC\s+rt\s+paused\s+-\s`).MatchString(list) {
		t.Fatalf("list while paused:\n%s", list)
	}
	var infos []scheduleJSON
	runJSON(t, &infos, "schedules", "list", "--json", "--database-url", db.URL)
	if len(infos) != 1 || !infos[0].Paused || infos[0].PausedBy != "ops" || !infos[0].Runtime || strings.Join(strings.Fields(string(infos[0].Args)), "") != `{"v":1}` ||
		infos[0].Queue != "q1" || infos[0].CatchUp != "latest" || infos[0].PausedAt == nil {
		t.Fatalf("list --json while paused: %+v", infos)
	}
	time.Sleep(2500 * time.Millisecond)
	if n := jobsOf(); n != paused {
		t.Fatalf("%d jobs enqueued while paused", n-paused)
	}

	mustRun(`^schedule "rt" resumed: every instance enqueues its fires again within a few seconds; those of the pause are not caught up\n$`,
		"schedules", "resume", "rt")
	mustRun(`^schedule "rt" was not paused; nothing changed\n$`, "schedules", "resume", "rt")
	testwatch.WaitFor(t, 30*time.Second, "a fire after the resume", func() bool { return jobsOf() > paused })

	// Paused again so that the trigger's job is the only one (a trigger
	// runs a paused schedule).
	mustRun(`paused`, "schedules", "pause", "rt")
	before := jobsOf()
	first := mustRun(`^triggered schedule "rt": job \d+, fire \d{4}-`, "schedules", "trigger", "rt")
	mustRun(`^schedule "rt" was triggered at .*, less than 5s ago: its job \d+ stands; no job added\n$`, "schedules", "trigger", "rt")
	if n := jobsOf(); n != before+1 {
		t.Fatalf("%d jobs after two triggers, want %d", n, before+1)
	}
	t.Log(strings.TrimSpace(first))

	mustRun(`^deleted schedule "rt"; the jobs of its fires are kept\n$`, "schedules", "delete", "rt")
	for _, action := range []string{"pause", "resume", "trigger", "delete"} {
		if _, errs, code := cli("schedules", action, "rt"); code != 1 || !strings.HasSuffix(errs, "jobfence schedules: no schedule named \"rt\"\n") {
			t.Errorf("%s of a deleted schedule: code %d, stderr %q", action, code, errs)
		}
	}
	if _, errs, code := cli("schedules", "add", "bad", "61 * * * *", "k"); code != 1 || !strings.Contains(errs, `invalid cron spec`) {
		t.Fatalf("add of a bad spec: code %d, stderr %q", code, errs)
	}
}
