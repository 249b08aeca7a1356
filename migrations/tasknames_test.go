package migrations_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobfence/jobfence/internal/pgtest"
)

// TestTaskNamesFromTheReleaseBefore: migration 22 writes into
// jobfence_workflow_tasks the names of the tasks inserted before it (ids
// far apart included), and its trigger the names of tasks inserted as the
// release before inserts them, without names of their own, while the
// fleet is upgraded (from any search_path); a name given twice is
// refused. An insert that
// writes its names itself (this release's, marked by
// jobfence.task_names) is left alone by the trigger. Migration 22 drops
// the jobs' unique index of task names, and going down builds it again.
func TestTaskNamesFromTheReleaseBefore(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t, pgtest.Options{NoMigrate: true})
	p := providerAt(t, db.URL, 21)
	const wf = "5f0c4e4a-7d3b-4c8e-9a51-2b6f0f1d2c01"
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_workflows (id, name) VALUES ($1, 'before')`, wf); err != nil {
		t.Fatal(err)
	}
	task := func(ctx context.Context, id int64, name string) error {
		_, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_jobs (id, queue, kind, args, workflow_id, task_name)
			OVERRIDING SYSTEM VALUE VALUES ($1, 'q', 'k', '{}', $2, $3)`, id, wf, name)
		return err
	}
	for _, tk := range []struct {
		id   int64
		name string
	}{{1, "a"}, {2, "b"}, {500000, "far"}} {
		if err := task(ctx, tk.id, tk.name); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := db.Pool.Exec(ctx, `INSERT INTO jobfence_jobs (id, queue, kind, args) OVERRIDING SYSTEM VALUE VALUES (3, 'q', 'k', '{}')`); err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(ctx, 22); err != nil {
		t.Fatal(err)
	}
	names := func() map[string]int64 {
		t.Helper()
		rows, err := db.Pool.Query(ctx, `SELECT task_name, job_id FROM jobfence_workflow_tasks WHERE workflow_id = $1`, wf)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]int64{}
		for rows.Next() {
			var n string
			var id int64
			if err := rows.Scan(&n, &id); err != nil {
				t.Fatal(err)
			}
			out[n] = id
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := names(); len(got) != 3 || got["a"] != 1 || got["b"] != 2 || got["far"] != 500000 {
		t.Fatalf("names after migration 22 = %v, want a: 1, b: 2, far: 500000", got)
	}
	// As the release before inserts a task: the trigger writes its name.
	if err := task(ctx, 4, "c"); err != nil {
		t.Fatal(err)
	}
	if got := names(); got["c"] != 4 {
		t.Fatalf("names after the release before inserted c = %v, want c: 4", got)
	}
	// From a session whose search_path does not lead to jobfence's tables.
	other, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Rollback(ctx)
	if _, err := other.Exec(ctx, `SET LOCAL search_path = pg_catalog`); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, `INSERT INTO `+db.Schema+`.jobfence_jobs (id, queue, kind, args, workflow_id, task_name)
		OVERRIDING SYSTEM VALUE VALUES (8, 'q', 'k', '{}', $1, 'elsewhere')`, wf); err != nil {
		t.Fatal(err)
	}
	if err := other.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if got := names(); got["elsewhere"] != 8 {
		t.Fatalf("names after an insert from another search_path = %v, want elsewhere: 8", got)
	}
	err = task(ctx, 5, "c")
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23505" || pgErr.ConstraintName != "jobfence_workflow_tasks_pkey" {
		t.Fatalf("a second task named c = %v, want a unique violation of jobfence_workflow_tasks_pkey", err)
	}
	// An insert marked as writing its names itself: no name from the trigger.
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT set_config('jobfence.task_names', 'written', true)`); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `INSERT INTO jobfence_jobs (id, queue, kind, args, workflow_id, task_name)
		OVERRIDING SYSTEM VALUE VALUES (6, 'q', 'k', '{}', $1, 'd')`, wf); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, `SELECT count(*) FROM jobfence_workflow_tasks WHERE task_name = 'd'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("names of d written by the trigger: %d, %v; want none", n, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	index := func() bool {
		t.Helper()
		var ok bool
		if err := db.Pool.QueryRow(ctx, `SELECT to_regclass('jobfence_jobs_workflow') IS NOT NULL`).Scan(&ok); err != nil {
			t.Fatal(err)
		}
		return ok
	}
	if index() {
		t.Fatal("jobfence_jobs_workflow is still there after migration 22")
	}
	if _, err := p.DownTo(ctx, 21); err != nil {
		t.Fatal(err)
	}
	if !index() {
		t.Fatal("jobfence_jobs_workflow is missing after going down past 22")
	}
	var left bool
	if err := db.Pool.QueryRow(ctx, `SELECT to_regclass('jobfence_workflow_tasks') IS NOT NULL
		OR EXISTS (SELECT FROM pg_trigger WHERE tgrelid = 'jobfence_jobs'::regclass AND tgname = 'jobfence_jobs_task_named')
		OR to_regproc('jobfence_workflow_task_named') IS NOT NULL`).Scan(&left); err != nil || left {
		t.Fatalf("after going down past 22: table, trigger or function left = %v, %v; want none", left, err)
	}
	// The release before's insert of a task works as it did.
	if err := task(ctx, 7, "e"); err != nil {
		t.Fatal(err)
	}
}

// TestTaskNamesDownGivesUpOnAFrozenHolder: a session frozen inside a
// transaction that read jobfence_workflow_tasks (an append whose client
// stopped) holds down past version 22 1 s at most, its lock_timeout: the
// down fails with lock_not_available, the names table and its trigger
// stay, and once the holder is gone the down goes.
func TestTaskNamesDownGivesUpOnAFrozenHolder(t *testing.T) {
	ctx := context.Background()
	db := pgtest.New(t)
	p, holder := frozenReaderHoldsDown(t, db, "jobfence_workflow_tasks", 22)
	var kept bool
	if err := db.Pool.QueryRow(ctx, `SELECT to_regclass('jobfence_workflow_tasks') IS NOT NULL
		AND EXISTS (SELECT FROM pg_trigger WHERE tgrelid = 'jobfence_jobs'::regclass AND tgname = 'jobfence_jobs_task_named')`).Scan(&kept); err != nil || !kept {
		t.Fatalf("names table and trigger kept = %v, %v after the refused down; want both kept", kept, err)
	}
	if err := holder.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := p.DownTo(ctx, 21); err != nil {
		t.Fatalf("down past 22 once the holder is gone: %v", err)
	}
}
