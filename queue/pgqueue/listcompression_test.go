package pgqueue_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// TestLongListsAreCompressedWithLZ4: a fan-out's long lists (the root's
// dependents, the fan-in's dependencies) are stored whole and in order,
// compressed with lz4 where the server has it (pglz, PostgreSQL's default,
// where it has not), and so is the root's list once an append lengthens
// it; a caller's own compression setting holds again in its transaction
// after InsertWorkflowTx.
func TestLongListsAreCompressedWithLZ4(t *testing.T) {
	ctx := context.Background()
	c, db := newClient(t)
	var lz4 bool
	if err := db.Pool.QueryRow(ctx, `SELECT EXISTS (SELECT FROM pg_settings
		WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals))`).Scan(&lz4); err != nil {
		t.Fatal(err)
	}
	want := "pglz"
	if lz4 {
		want = "lz4"
	}
	const width = 1000
	p, names := fanOut("lists", width)

	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SET LOCAL default_toast_compression = pglz`); err != nil {
		t.Fatal(err)
	}
	res, err := c.InsertWorkflowTx(ctx, tx, p)
	if err != nil {
		t.Fatal(err)
	}
	var setting string
	if err := tx.QueryRow(ctx, `SHOW default_toast_compression`).Scan(&setting); err != nil {
		t.Fatal(err)
	}
	if setting != "pglz" {
		t.Errorf("after InsertWorkflowTx the caller's transaction compresses with %s, want its own pglz", setting)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	parts := make([]int64, width)
	for i, n := range names {
		parts[i] = res.Tasks[n]
	}
	root, sum := res.Tasks["root"], res.Tasks["sum"]
	// lists reads a task's list and how it is compressed.
	lists := func(id int64, column string) ([]int64, string) {
		t.Helper()
		var ids []int64
		var how string
		if err := db.Pool.QueryRow(ctx, `SELECT `+column+`, coalesce(pg_column_compression(`+column+`), 'none')
			FROM jobfence_jobs WHERE id = $1`, id).Scan(&ids, &how); err != nil {
			t.Fatal(err)
		}
		return ids, how
	}
	check := func(what string, got []int64, how string, ids []int64) {
		t.Helper()
		if !slices.Equal(got, ids) {
			t.Errorf("%s: %d IDs %v..., want the %d IDs %v...", what, len(got), got[:min(3, len(got))], len(ids), ids[:3])
		}
		if how != want {
			t.Errorf("%s is compressed with %s, want %s", what, how, want)
		}
	}
	got, how := lists(root, "dependents")
	check("the root's dependents", got, how, parts)
	got, how = lists(sum, "depends_on")
	check("the fan-in's dependencies", got, how, parts)
	if got, _ := lists(parts[0], "depends_on"); !slices.Equal(got, []int64{root}) {
		t.Errorf("a part's dependencies are %v, want [%d]", got, root)
	}

	// An append's dependents wait as edges (jobfence_task_edges) while
	// the root runs; once it has ended, the promoter's sweep adds them at
	// the end of the root's list, which it stores anew.
	more := queue.WorkflowParams{ID: res.ID}
	for i := range width {
		more.Tasks = append(more.Tasks, task(fmt.Sprintf("late-%d", i), "lists", "root"))
	}
	added, err := c.InsertWorkflow(ctx, more)
	if err != nil {
		t.Fatal(err)
	}
	for i := range width {
		parts = append(parts, added.Tasks[fmt.Sprintf("late-%d", i)])
	}
	few := queue.WorkflowParams{ID: res.ID}
	for i := range 3 {
		few.Tasks = append(few.Tasks, task(fmt.Sprintf("few-%d", i), "lists", "root"))
	}
	if added, err = c.InsertWorkflow(ctx, few); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		parts = append(parts, added.Tasks[fmt.Sprintf("few-%d", i)])
	}
	jobs := claim(t, c, "lists", 1, time.Minute)
	if len(jobs) != 1 || jobs[0].ID != root {
		t.Fatalf("claimed %v, want the root %d", jobs, root)
	}
	if stale, err := c.Finish(ctx, []queue.Finish{{Lease: jobs[0].Lease(), Outcome: queue.OutcomeComplete, Workflow: true}}); err != nil || len(stale) != 0 {
		t.Fatalf("complete the root: stale %v, %v", stale, err)
	}
	if _, err := c.Promote(ctx, 10000); err != nil {
		t.Fatal(err)
	}
	got, how = lists(root, "dependents")
	check("the root's dependents after the appends' sweep", got, how, parts)
}
