package jobfencetest_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// printT stands in for a test's t in these examples, which have none: it
// prints the first line of a failure instead of failing.
type printT struct{}

func (printT) Helper() {}
func (printT) Fatalf(format string, args ...any) {
	first, _, _ := strings.Cut(fmt.Sprintf(format, args...), "\n")
	fmt.Println("FAIL:", strings.TrimSpace(first))
}

// openExampleDB is what jobfencetest.NewDB(t) does in a test.
func openExampleDB(ctx context.Context) *jobfencetest.DB {
	db, err := jobfencetest.OpenDB(ctx, os.Getenv("DATABASE_URL")) // set by jobfencetest.Main
	if err != nil {
		log.Fatal(err)
	}
	return db
}

func ExampleRequireInserted() {
	ctx := context.Background()
	db := openExampleDB(ctx)
	defer db.Close()
	t := printT{} // in a test: func TestSignup(t *testing.T)

	// The code under test enqueues a welcome mail.
	jobs := pgqueue.New(db.Pool, pgqueue.Config{})
	if _, err := jobs.Insert(ctx, welcomeMail{To: "ada@example.com"}, &queue.InsertOpts{Queue: "mail"}); err != nil {
		log.Fatal(err)
	}

	mail := jobfencetest.RequireInserted[welcomeMail](ctx, t, db.Pool, &jobfencetest.Match{Queue: "mail"})
	fmt.Println("to:", mail.Args.To)

	// A failed assertion says what was enqueued instead.
	jobfencetest.RequireInserted[welcomeMail](ctx, t, db.Pool, &jobfencetest.Match{Queue: "default"})
	// Output:
	// to: ada@example.com
	// FAIL: jobfencetest: no job of kind "welcome_mail" with queue=default was enqueued; enqueued:
}

func ExampleWork() {
	ctx := context.Background()
	db := openExampleDB(ctx)
	defer db.Close()
	t := printT{}

	// The client your service builds: its handlers, queues and worker
	// configuration. The test does not start it.
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, job *jobfence.Job[charge]) error {
		if job.Args.Cents > 10000 {
			return worker.JobCancel(errDeclined)
		}
		if job.Args.Mode == "fail" {
			return errDeclined
		}
		return nil
	})
	client, err := jobfence.NewClient(db.Pool, jobfence.Config{Queues: map[string]int{"default": 10}, Handlers: reg})
	if err != nil {
		log.Fatal(err)
	}
	w := jobfencetest.NewWorker(t, client)

	r := jobfencetest.Work(ctx, t, w, charge{Cents: 500}, nil)
	fmt.Println(r.Outcome, r.Job.State)

	r = jobfencetest.Work(ctx, t, w, charge{Cents: 500, Mode: "fail"}, nil)
	fmt.Println(r.Outcome, r.Job.State, errors.Is(r.Err, errDeclined))

	r = jobfencetest.Work(ctx, t, w, charge{Cents: 500, Mode: "fail"}, &queue.InsertOpts{Queue: "once", MaxAttempts: 1})
	fmt.Println(r.Outcome, r.Job.State)

	r = jobfencetest.Work(ctx, t, w, charge{Cents: 20000}, &queue.InsertOpts{Queue: "big"})
	fmt.Println(r.Outcome, r.Job.State)
	// Output:
	// complete completed
	// retry retryable true
	// retry discarded
	// cancel cancelled
}

func ExampleRequireManyInserted() {
	ctx := context.Background()
	db := openExampleDB(ctx)
	defer db.Close()
	t := printT{}

	jobs := pgqueue.New(db.Pool, pgqueue.Config{})
	for _, a := range []queue.Args{invoice{ID: 1}, welcomeMail{To: "ada@example.com"}} {
		if _, err := jobs.Insert(ctx, a, nil); err != nil {
			log.Fatal(err)
		}
	}
	got := jobfencetest.RequireManyInserted(ctx, t, db.Pool, []jobfencetest.Expected{
		{Kind: "invoice"},
		{Kind: "welcome_mail"},
	})
	fmt.Println(len(got), "jobs, in order")
	// Output:
	// 2 jobs, in order
}
