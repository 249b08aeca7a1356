package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestWorkersCLI: workers list shows each registered instance, live or
// missing its reports, as a table and as JSON.
func TestWorkersCLI(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{})
	if out, errs, code := cli(t, "workers", "list", "--database-url", db.URL); code != 0 || out != "no workers registered: none is running, or none has reported yet\n" {
		t.Fatalf("empty: exit %d, stdout %q, stderr %q", code, out, errs)
	}
	started := time.Now().Add(-time.Hour)
	for _, inst := range []queue.Instance{
		{ID: "api-1", Host: "node-a", PID: 101, Queues: []string{"mail", "default"}, Running: 3, Completed: 1200, Stale: 2, Lost: 1,
			StartedAt: started, Interval: 10 * time.Second},
		{ID: "api-2", Host: "node-b", PID: 202, Queues: []string{"default"}, StartedAt: started, Interval: time.Second},
	} {
		if err := c.Register(ctx, inst); err != nil {
			t.Fatal(err)
		}
	}
	// api-2 missed its last reports.
	if _, err := db.Pool.Exec(ctx, `UPDATE jobfence_workers SET last_seen_at = now() - interval '5 seconds' WHERE id = 'api-2'`); err != nil {
		t.Fatal(err)
	}
	out, errs, code := cli(t, "workers", "list", "--database-url", db.URL)
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if code != 0 || len(lines) != 3 {
		t.Fatalf("list: exit %d, stderr %q, stdout:\n%s\nwant a header and two rows", code, errs, out)
	}
	if got, want := words(lines[0]), "ID HOST PID QUEUES RUNNING COMPLETED STALE LOST STARTED LAST SEEN STATUS"; got != want {
		t.Errorf("header %q, want %q", got, want)
	}
	for i, want := range []string{
		fmt.Sprintf("api-1 node-a 101 default,mail 3 1200 2 1 %s", formatTime(started)),
		fmt.Sprintf("api-2 node-b 202 default 0 0 0 0 %s", formatTime(started)),
	} {
		f := strings.Fields(lines[i+1])
		if got := strings.Join(f[:10], " "); got != want {
			t.Errorf("row %q, want it to start %q", lines[i+1], want)
		}
		age, err := time.ParseDuration(f[10])
		status := []string{"live", "missing"}[i]
		if err != nil || f[11] != "ago" || f[12] != status || age > time.Minute {
			t.Errorf("row %q: want a last-seen age under a minute, then %s", lines[i+1], status)
		}
	}

	out, errs, code = cli(t, "workers", "list", "--json", "--database-url", db.URL)
	var js []map[string]any
	if err := json.Unmarshal([]byte(out), &js); code != 0 || err != nil || len(js) != 2 {
		t.Fatalf("list --json: exit %d, stderr %q, %v, stdout:\n%s", code, errs, err, out)
	}
	if js[0]["id"] != "api-1" || js[0]["pid"] != 101.0 || fmt.Sprint(js[0]["queues"]) != "[default mail]" || js[0]["completed"] != 1200.0 ||
		js[0]["heartbeat_interval_ms"] != 10000.0 || js[0]["live"] != true || js[0]["last_seen_at"] == nil {
		t.Errorf("api-1 as JSON: %v", js[0])
	}
	if js[1]["id"] != "api-2" || js[1]["live"] != false {
		t.Errorf("api-2 as JSON: %v", js[1])
	}
}
