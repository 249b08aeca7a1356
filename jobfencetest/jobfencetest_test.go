package jobfencetest_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

func TestMain(m *testing.M) { jobfencetest.Main(m) }

type welcomeMail struct {
	To string `json:"to"`
}

func (welcomeMail) Kind() string { return "welcome_mail" }

type invoice struct {
	ID int64 `json:"id"`
}

func (invoice) Kind() string { return "invoice" }

// recorder is a TestingT whose Fatalf records the message instead of
// stopping the test, so a test can check what a failing assertion says.
type recorder struct{ msgs []string }

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.msgs = append(r.msgs, fmt.Sprintf(format, args...))
}

func (r *recorder) requireFailed(t *testing.T, wants ...string) {
	t.Helper()
	if len(r.msgs) == 0 {
		t.Fatal("the assertion passed; want it to fail")
	}
	for _, w := range wants {
		if !strings.Contains(r.msgs[0], w) {
			t.Errorf("failure message %q does not contain %q", r.msgs[0], w)
		}
	}
}

func TestNewDBIsolatesTests(t *testing.T) {
	ctx := context.Background()
	a, b := jobfencetest.NewDB(t), jobfencetest.NewDB(t)
	if a.Schema == b.Schema {
		t.Fatalf("two tests share schema %s", a.Schema)
	}
	if _, err := pgqueue.New(a.Pool, pgqueue.Config{}).Insert(ctx, welcomeMail{To: "a"}, nil); err != nil {
		t.Fatal(err)
	}
	jobfencetest.RequireInserted[welcomeMail](ctx, t, a.Pool, nil)
	jobfencetest.RequireNotInserted[welcomeMail](ctx, t, b.Pool, nil)
}

func TestCloseDropsTheSchema(t *testing.T) {
	ctx := context.Background()
	owner := jobfencetest.NewDB(t)
	db, err := jobfencetest.OpenDB(ctx, owner.URL)
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := owner.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_namespace WHERE nspname = $1`, db.Schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("schema %s still exists after Close", db.Schema)
	}
}

func TestOpenDBReportsAnUnreachableServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := jobfencetest.OpenDB(ctx, "postgres://nobody:secret@127.0.0.1:1/x?sslmode=disable&connect_timeout=2")
	if err == nil {
		t.Fatal("OpenDB on a closed port succeeded")
	}
	if !strings.Contains(err.Error(), "connect postgres://nobody:xxxxx@127.0.0.1:1/") || strings.Contains(err.Error(), "secret") {
		t.Fatalf("error %q should say it could not connect, without the password", err)
	}
}

func TestRequireInsertedMatchesAndDecodes(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	jobs := pgqueue.New(db.Pool, pgqueue.Config{})
	at := time.Now().Add(time.Hour).Round(time.Millisecond)
	if _, err := jobs.Insert(ctx, invoice{ID: 1}, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := jobs.Insert(ctx, invoice{ID: 2}, &queue.InsertOpts{Queue: "billing", Priority: 2, UniqueKey: "inv:2", ScheduledAt: at, MaxAttempts: 3}); err != nil {
		t.Fatal(err)
	}
	got := jobfencetest.RequireInserted[invoice](ctx, t, db.Pool, &jobfencetest.Match{
		Queue: "billing", Priority: 2, UniqueKey: "inv:2", ScheduledAt: at, MaxAttempts: 3, State: queue.StateScheduled,
	})
	if got.Args.ID != 2 || got.Job.Queue != "billing" {
		t.Fatalf("got %+v, want invoice 2 in billing", got)
	}

	r := &recorder{}
	jobfencetest.RequireInserted[invoice](ctx, r, db.Pool, nil)
	r.requireFailed(t, `2 jobs of kind "invoice"`, `{"id": 1}`, `{"id": 2}`)

	r = &recorder{}
	jobfencetest.RequireInserted[invoice](ctx, r, db.Pool, &jobfencetest.Match{Queue: "billing", Priority: 4})
	r.requireFailed(t, `no job of kind "invoice" with queue=billing priority=4`, "queue=billing priority=2", "unique_key=inv:2")

	r = &recorder{}
	jobfencetest.RequireInserted[welcomeMail](ctx, r, db.Pool, nil)
	r.requireFailed(t, `no job of kind "welcome_mail" was enqueued; enqueued:`, "invoice queue=default")
}

func TestRequireInsertedTxSeesUncommittedJobs(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	jobs := pgqueue.New(db.Pool, pgqueue.Config{})
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := jobs.InsertTx(ctx, tx, welcomeMail{To: "ada@example.com"}, nil); err != nil {
		t.Fatal(err)
	}
	got := jobfencetest.RequireInsertedTx[welcomeMail](ctx, t, tx, nil)
	if got.Args.To != "ada@example.com" {
		t.Fatalf("args %+v", got.Args)
	}
	// RequireInserted takes a transaction as RequireNotInserted does.
	if again := jobfencetest.RequireInserted[welcomeMail](ctx, t, tx, nil); again.Job.ID != got.Job.ID {
		t.Fatalf("RequireInserted in tx found job %d, RequireInsertedTx %d", again.Job.ID, got.Job.ID)
	}
	jobfencetest.RequireNotInserted[welcomeMail](ctx, t, db.Pool, nil)
}

func TestRequireNotInsertedListsWhatItFound(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	if _, err := pgqueue.New(db.Pool, pgqueue.Config{}).Insert(ctx, welcomeMail{To: "x"}, &queue.InsertOpts{Queue: "mail"}); err != nil {
		t.Fatal(err)
	}
	jobfencetest.RequireNotInserted[welcomeMail](ctx, t, db.Pool, &jobfencetest.Match{Queue: "other"})
	r := &recorder{}
	jobfencetest.RequireNotInserted[welcomeMail](ctx, r, db.Pool, &jobfencetest.Match{Queue: "mail"})
	r.requireFailed(t, `want no job of kind "welcome_mail" with queue=mail, found 1`, `{"to": "x"}`)
}

func TestRequireManyInsertedChecksKindsAndOrder(t *testing.T) {
	ctx := context.Background()
	db := jobfencetest.NewDB(t)
	jobs := pgqueue.New(db.Pool, pgqueue.Config{})
	err := pgx.BeginFunc(ctx, db.Pool, func(tx pgx.Tx) error {
		for _, a := range []queue.Args{invoice{ID: 1}, welcomeMail{To: "a"}, invoice{ID: 2}} {
			if _, err := jobs.InsertTx(ctx, tx, a, nil); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	got := jobfencetest.RequireManyInserted(ctx, t, db.Pool, []jobfencetest.Expected{
		{Kind: "invoice"}, {Kind: "welcome_mail", Match: &jobfencetest.Match{Queue: "default"}}, {Kind: "invoice"},
	})
	if len(got) != 3 || got[1].Kind != "welcome_mail" {
		t.Fatalf("got %v", got)
	}
	// Jobs of kinds not asked about are ignored.
	jobfencetest.RequireManyInserted(ctx, t, db.Pool, []jobfencetest.Expected{{Kind: "welcome_mail"}})

	r := &recorder{}
	jobfencetest.RequireManyInserted(ctx, r, db.Pool, []jobfencetest.Expected{{Kind: "welcome_mail"}, {Kind: "invoice"}, {Kind: "invoice"}})
	r.requireFailed(t, `job 1 of 3: want kind "welcome_mail", got #`, "invoice")

	r = &recorder{}
	jobfencetest.RequireManyInserted(ctx, r, db.Pool, []jobfencetest.Expected{{Kind: "invoice"}})
	r.requireFailed(t, "want 1 jobs (invoice), 2 were enqueued")

	r = &recorder{}
	jobfencetest.RequireManyInserted(ctx, r, db.Pool, nil)
	r.requireFailed(t, "want is empty; use RequireNotInserted")
}
