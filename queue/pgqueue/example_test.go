package pgqueue_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/jobfence/jobfence/jobfencetest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// openExampleDB opens a fresh, migrated schema on the test server
// (DATABASE_URL is set by the package's TestMain); a service passes its
// own pool to pgqueue.New instead.
func openExampleDB(ctx context.Context) *jobfencetest.DB {
	db, err := jobfencetest.OpenDB(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	return db
}

// Pause a queue for the whole fleet, for example while the mail provider
// is down: workers stop claiming its jobs within a second, running jobs
// finish, and enqueueing goes on. Resume when it is back.
func ExampleClient_PauseQueue() {
	ctx := context.Background()
	db := openExampleDB(ctx)
	defer db.Close()
	jobs := pgqueue.New(db.Pool, pgqueue.Config{})
	if _, err := jobs.Enqueue(ctx, queue.EnqueueParams{Kind: "welcome_mail", Queue: "mail"}); err != nil {
		log.Fatal(err)
	}

	if err := jobs.PauseQueue(ctx, "mail", "ada@ops"); err != nil {
		log.Fatal(err)
	}
	qs, err := jobs.Queues(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, q := range qs {
		fmt.Printf("%s: paused %t by %s, %s available\n", q.Name, q.Paused, q.PausedBy, q.Counts[queue.StateAvailable])
	}

	if err := jobs.ResumeQueue(ctx, "mail", "ada@ops"); err != nil {
		log.Fatal(err)
	}
	paused, err := jobs.PausedQueues(ctx, []string{"mail"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("paused after the resume:", paused)
	// Output:
	// mail: paused true by ada@ops, 1 available
	// paused after the resume: []
}

// Every running worker reports itself at its heartbeat interval; Workers
// lists them, and a clean Stop removes the worker's row.
func ExampleClient_Workers() {
	ctx := context.Background()
	db := openExampleDB(ctx)
	defer db.Close()
	jobs := pgqueue.New(db.Pool, pgqueue.Config{})
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[welcomeMail]) error { return nil })
	w, err := worker.New(jobs, reg, worker.Config{ID: "api-1", Queues: map[string]int{"mail": 10, "default": 5}})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	// The first report is sent as the worker starts.
	var ws []pgqueue.WorkerInfo
	for deadline := time.Now().Add(10 * time.Second); len(ws) == 0 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if ws, err = jobs.Workers(ctx); err != nil {
			log.Fatal(err)
		}
	}
	for _, wi := range ws {
		fmt.Printf("%s on %v: live %t, %d running\n", wi.ID, wi.Queues, wi.Live, wi.Running)
	}

	if err := w.Stop(ctx); err != nil {
		log.Fatal(err)
	}
	if ws, err = jobs.Workers(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("registered after Stop:", len(ws))
	// Output:
	// api-1 on [default mail]: live true, 0 running
	// registered after Stop: 0
}

// welcomeMail is a job's typed arguments.
type welcomeMail struct {
	To string `json:"to"`
}

// Kind implements queue.Args.
func (welcomeMail) Kind() string { return "welcome_mail" }

// A Count reads as a person would write it: exact, at least a number
// where counting stopped at the cap, or "?" where it stopped before this
// queue's jobs.
func ExampleCount() {
	fmt.Println(pgqueue.Count{N: 1234})
	fmt.Println(pgqueue.Count{N: pgqueue.DefaultCountCap, AtLeast: true})
	fmt.Println(pgqueue.Count{AtLeast: true})
	// Output:
	// 1,234
	// 10,000+
	// ?
}

// accountSync is a job's typed arguments; only the tagged field makes a
// duplicate.
type accountSync struct {
	Account int64  `json:"account" unique:"true"`
	Reason  string `json:"reason"`
}

// Kind implements queue.Args.
func (accountSync) Kind() string { return "account_sync" }

// Unique jobs: a second insert of the same account's sync, while the first
// is unfinished, returns the first; once it has completed, the next insert
// makes a new job. With Debounce, a duplicate of a job that has not
// started moves it to the new insert's time instead.
func ExampleClient_Insert_unique() {
	ctx := context.Background()
	db := openExampleDB(ctx)
	defer db.Close()
	jobs := pgqueue.New(db.Pool, pgqueue.Config{})
	unique := &queue.InsertOpts{Unique: &queue.UniqueOpts{ByArgs: true}}
	first, err := jobs.Insert(ctx, accountSync{Account: 7, Reason: "signup"}, unique)
	if err != nil {
		log.Fatal(err)
	}
	dup, err := jobs.Insert(ctx, accountSync{Account: 7, Reason: "profile changed"}, unique)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("duplicate: inserted %t, same job %t, %s\n", dup.Inserted, dup.ID == first.ID, dup.State)

	claimed, err := jobs.Claim(ctx, queue.ClaimParams{Queue: queue.DefaultQueue, Limit: 1, Lease: time.Minute, WorkerID: "example"})
	if err != nil || len(claimed) != 1 {
		log.Fatal(claimed, err)
	}
	if err := jobs.Complete(ctx, claimed[0].Lease()); err != nil {
		log.Fatal(err)
	}
	next, err := jobs.Insert(ctx, accountSync{Account: 7, Reason: "plan changed"}, unique)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("after completion: inserted %t, new job %t\n", next.Inserted, next.ID != first.ID)

	in := time.Now().Add(time.Minute)
	debounce := &queue.InsertOpts{ScheduledAt: in, Unique: &queue.UniqueOpts{ByArgs: true, Debounce: true}}
	a, err := jobs.Insert(ctx, accountSync{Account: 8}, debounce)
	if err != nil {
		log.Fatal(err)
	}
	debounce.ScheduledAt = in.Add(time.Minute)
	b, err := jobs.Insert(ctx, accountSync{Account: 8}, debounce)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("debounced: inserted %t, moved %t, same job %t, %s\n", b.Inserted, b.Debounced, b.ID == a.ID, b.State)
	// Output:
	// duplicate: inserted false, same job true, available
	// after completion: inserted true, new job true
	// debounced: inserted false, moved true, same job true, scheduled
}
