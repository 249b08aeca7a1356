// Package jobfencetest helps you test code that uses jobfence, against a
// real PostgreSQL server:
//
//   - Main (from TestMain) provides a server for the test binary: the one
//     DATABASE_URL names, or a throwaway one started from the system's
//     binaries and removed when the tests end. NewDB gives each test a
//     migrated schema of its own, dropped when the test ends, so tests
//     can run in parallel without seeing each other's jobs.
//   - RequireInserted, RequireInsertedTx, RequireNotInserted and
//     RequireManyInserted assert what your code enqueued, and return the
//     decoded args; a failure lists what was enqueued instead.
//   - Work runs one job through the worker's own execution path (fenced
//     claim, middleware, timeout, transactional handlers in their
//     transaction, fenced outcome) and returns what became of it, so a
//     unit test exercises exactly the code a worker runs; Worker.RetryNow
//     runs a failed attempt's retry at once.
//   - NewWorker builds that Worker from your service's jobfence.Client
//     (its handlers and worker configuration), unstarted; NewPGWorker
//     from the layer below (a pgqueue.Client, a registry, a config).
//   - WaitFinal waits for the jobs a started Client runs to end, and
//     fails naming each job still waiting, and why.
//   - WorkerConfig is a worker configuration with short polls and leases
//     for tests that start a whole worker.
//
// A test file:
//
//	func TestMain(m *testing.M) { jobfencetest.Main(m) }
//
//	func TestSignupSendsWelcome(t *testing.T) {
//		db := jobfencetest.NewDB(t)
//		signup(ctx, db.Pool, "ada@example.com") // your code, which enqueues
//		mail := jobfencetest.RequireInserted[WelcomeMail](ctx, t, db.Pool, nil)
//		if mail.Args.To != "ada@example.com" { t.Fatalf(...) }
//	}
//
// Package devserver, beside this one, starts the same throwaway servers
// for programs (examples, local development) without linking package
// testing.
//
// See docs/testing.md.
package jobfencetest
