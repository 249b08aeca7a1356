package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// words joins line's whitespace-separated fields with single spaces:
// tabwriter pads columns, the test compares their contents.
func words(line string) string { return strings.Join(strings.Fields(line), " ") }

// TestQueuesCLI: list shows each queue's counts and pause; pause and
// resume say what they did and who did it; a pause of a queue without
// jobs says the name may be misspelt; resuming a running queue says
// nothing changed; --json gives scripts every state's count. Limited and
// pending jobs have columns of their own: a queue of jobs waiting on a
// limit is not idle.
func TestQueuesCLI(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	if out, errs, code := cli(t, "queues", "list", "--database-url", db.URL); code != 0 || out != "no queues: no job was enqueued and no queue was paused\n" {
		t.Fatalf("empty: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	for _, p := range []queue.EnqueueParams{
		{Kind: "k", Queue: "mail"}, {Kind: "k", Queue: "mail"},
		{Kind: "k", Queue: "reports", ScheduledAt: time.Now().Add(time.Hour)},
	} {
		if _, err := c.Enqueue(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	// 143 emails wait on a limit, and a report task on its dependency:
	// neither queue is idle.
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO jobfence_jobs (queue, kind, state, scheduled_at, limit_name, limit_part)
SELECT 'mail', 'k', 'limited', now(), 'smtp', '' FROM generate_series(1, 143)`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Pool.Exec(ctx, `
WITH w AS (INSERT INTO jobfence_workflows (id, name) VALUES (md5('w')::uuid, 'w') RETURNING id)
INSERT INTO jobfence_jobs (queue, kind, state, scheduled_at, workflow_id, task_name, deps_left)
SELECT 'reports', 'k', 'pending', now(), w.id, 'summary', 1 FROM w`); err != nil {
		t.Fatal(err)
	}

	out, errs, code := cli(t, "queues", "pause", "mail", "--by", "alice@ops", "--database-url", db.URL)
	if want := `queue "mail" paused by alice@ops: workers stop claiming its jobs within about a second; running jobs finish` + "\n"; code != 0 || out != want {
		t.Fatalf("pause: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errs, out, want)
	}
	out, errs, code = cli(t, "queues", "list", "--database-url", db.URL)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("list: exit %d, stderr %q, stdout:\n%s\nwant a header and two rows", code, errs, out)
	}
	if got, want := words(lines[0]), "QUEUE STATUS AVAILABLE SCHEDULED LIMITED PENDING RUNNING RETRYABLE COMPLETED DISCARDED CANCELLED OLDEST READY PAUSED SINCE PAUSED BY FLEET"; got != want {
		t.Errorf("header %q, want %q", got, want)
	}
	qs, err := c.Queues(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mail := strings.Fields(lines[1])
	if want := "mail paused 2 0 143 0 0 0 0 0 0"; strings.Join(mail[:11], " ") != want || mail[len(mail)-2] != "alice@ops" || mail[len(mail)-1] != "-" ||
		strings.Join(mail[12:14], " ") != formatTime(qs[0].PausedAt) {
		t.Errorf("mail row %q, want %q, an age, paused since %s by alice@ops", lines[1], want, formatTime(qs[0].PausedAt))
	}
	if _, err := time.ParseDuration(mail[11]); err != nil {
		t.Errorf("mail row %q: oldest ready %q is not an age: %v", lines[1], mail[11], err)
	}
	if got, want := words(lines[2]), "reports running 0 1 0 1 0 0 0 0 0 - - - -"; got != want {
		t.Errorf("reports row %q, want %q", got, want)
	}

	out, errs, code = cli(t, "queues", "list", "--json", "--database-url", db.URL)
	var js []map[string]any
	if err := json.Unmarshal([]byte(out), &js); code != 0 || err != nil || len(js) != 2 {
		t.Fatalf("list --json: exit %d, stderr %q, %v, stdout:\n%s", code, errs, err, out)
	}
	if js[0]["name"] != "mail" || js[0]["paused"] != true || js[0]["paused_by"] != "alice@ops" || js[0]["paused_at"] == nil ||
		js[0]["oldest_available_at"] == nil || len(js[0]["counts"].(map[string]any)) != len(queue.States()) ||
		js[0]["counts"].(map[string]any)["available"] != 2.0 || js[0]["counts"].(map[string]any)["discarded"] != 0.0 ||
		js[0]["counts"].(map[string]any)["limited"] != 143.0 {
		t.Errorf("mail as JSON: %v", js[0])
	}
	// Every count is exact under the cap: no state is a lower bound, and
	// the list is empty, not null.
	if atLeast, ok := js[0]["counts_at_least"].([]any); !ok || len(atLeast) != 0 {
		t.Errorf("mail's counts_at_least = %#v, want []", js[0]["counts_at_least"])
	}
	if js[1]["name"] != "reports" || js[1]["paused"] != false || js[1]["paused_at"] != nil || js[1]["oldest_available_at"] != nil ||
		js[1]["counts"].(map[string]any)["pending"] != 1.0 {
		t.Errorf("reports as JSON: %v", js[1])
	}

	out, errs, code = cli(t, "queues", "pause", "--database-url", db.URL, "--by", "bob", "mial")
	if want := `queue "mial" paused by bob: workers stop claiming its jobs within about a second; running jobs finish` + "\n" +
		`note: queue "mial" has no jobs; if the name is misspelt, undo with: jobfence queues resume mial` + "\n"; code != 0 || out != want {
		t.Fatalf("pause of a queue without jobs: exit %d, stderr %q, stdout:\n%s\nwant:\n%s", code, errs, out, want)
	}
	out, errs, code = cli(t, "queues", "resume", "mial", "--database-url", db.URL)
	if want := `queue "mial" resumed by ` + defaultActor() + ": workers claim its jobs again\n"; code != 0 || out != want {
		t.Fatalf("resume: exit %d, stderr %q, stdout %q; want %q", code, errs, out, want)
	}
	out, errs, code = cli(t, "queues", "resume", "reports", "--database-url", db.URL)
	if want := `queue "reports" was not paused; nothing changed` + "\n"; code != 0 || out != want {
		t.Fatalf("resume of a running queue: exit %d, stderr %q, stdout %q; want %q", code, errs, out, want)
	}
	if qs, err := c.Queues(ctx); err != nil || len(qs) != 3 || !qs[0].Paused || qs[1].Name != "mial" || qs[1].Paused || qs[2].Paused {
		t.Fatalf("queues after the CLI: %+v, %v; want mail paused, mial and reports running", qs, err)
	}
}

// TestQueuesBadInput: each mistake gets a message that says what is wrong,
// exit status 1, and changes nothing.
func TestQueuesBadInput(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	usage := "usage: jobfence queues [--database-url URL] [--json] [--by WHO] list | pause NAME | resume NAME |\n"
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"queues"}, "jobfence queues: want an action: list, pause, resume, set, add, remove or reset\n"},
		{[]string{"queues", "pause"}, "jobfence queues: pause wants the queue's name\n"},
		{[]string{"queues", "resume", ""}, "jobfence queues: resume wants the queue's name\n"},
		{[]string{"queues", "frobnicate"}, `jobfence queues: unknown queues action "frobnicate": want list, pause, resume, set, add, remove or reset` + "\n"},
		{[]string{"queues", "set", "mail"}, "jobfence queues: set wants the queue's name and its concurrency: jobfence queues set mail CONCURRENCY\n"},
		{[]string{"queues", "add", "mail", "lots"}, `jobfence queues: add mail: concurrency "lots" is not a whole number` + "\n"},
		{[]string{"queues", "set", "mail", "0"}, `jobfence queues: set: jobfence: bad queue concurrency: queue "mail": concurrency 0 is out of range: it must be between 1 and 10000` + "\n"},
		{[]string{"queues", "add", "mail", "1000000"}, `jobfence queues: add: jobfence: bad queue concurrency: queue "mail": concurrency 1000000 is out of range: it must be between 1 and 10000` + "\n"},
		{[]string{"queues", "remove"}, "jobfence queues: remove wants the queue's name\n"},
		{[]string{"queues", "remove", "nosuch"}, `jobfence queues: pgqueue: stop queue "nosuch": jobfence: unknown queue: no worker works it and nothing is stored for it` + "\n"},
		{[]string{"queues", "set", "mail", "2", "3"}, `jobfence queues: unexpected arguments after set: ["3"]` + "\n"},
		{[]string{"queues", "pause", "a", "b"}, `jobfence queues: unexpected arguments after pause: ["b"]` + "\n"},
		{[]string{"queues", "pause", "a", "--json"}, "jobfence queues: --json applies to list, not pause\n"},
		{[]string{"queues", "list", "--by", "me"}, "jobfence queues: --by applies to pause, resume, set, add, remove and reset, not list\n"},
		{[]string{"workers"}, "jobfence workers: want an action: list\n"},
		{[]string{"workers", "kill", "w1"}, `jobfence workers: unknown workers action "kill": want list` + "\n"},
		{[]string{"workers", "list", "w1"}, `jobfence workers: unexpected arguments after list: ["w1"]` + "\n"},
	}
	for _, tt := range tests {
		out, errs, code := cli(t, append(tt.args, "--database-url", db.URL)...)
		// The message is the last line; a usage may come before it.
		if code != 1 || out != "" || !strings.HasSuffix(errs, tt.want) {
			t.Errorf("jobfence %q: exit %d, stdout %q, stderr:\n%s\nwant 1 and a last line:\n%s", tt.args, code, out, errs, tt.want)
		}
		if strings.Contains(errs, "usage:") && tt.args[0] == "queues" && !strings.HasPrefix(errs, usage) {
			t.Errorf("jobfence %q: usage is not the queues usage:\n%s", tt.args, errs)
		}
	}
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	if qs, err := c.Queues(context.Background()); err != nil || len(qs) != 0 {
		t.Fatalf("bad input changed the queues: %+v, %v", qs, err)
	}
	_, errs, code := cli(t, "queues", "list", "--database-url", "")
	if want := "jobfence queues: no database: pass --database-url or set DATABASE_URL\n"; code != 1 || errs != want {
		t.Errorf("no database: exit %d, stderr %q; want %q", code, errs, want)
	}
}
