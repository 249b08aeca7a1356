package jobfencetest

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// maxListed caps how many jobs the Require functions read: a test's
// schema holds what the test enqueued, far fewer.
const maxListed = 10000

// TestingT is the part of testing.TB that the Require functions and Work
// use: *testing.T and *testing.B satisfy it, and so can another test
// framework's. Its Fatalf should stop the test as testing.TB's does; if it
// does not, the function returns at once with a nil or zero result.
type TestingT interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Match narrows the jobs the Require functions look for, beyond their
// kind. Zero fields match anything.
type Match struct {
	// Queue is the queue the job was enqueued to.
	Queue string
	// Priority is the job's priority, 1 to 4.
	Priority int
	// UniqueKey is the job's unique key.
	UniqueKey string
	// ScheduledAt is when the job is scheduled to run, compared to the
	// microsecond (PostgreSQL's precision).
	ScheduledAt time.Time
	// MaxAttempts is the job's attempt budget.
	MaxAttempts int
	// State is the job's state, such as queue.StateAvailable.
	State queue.State
}

// Inserted is an enqueued job and its decoded args.
type Inserted[T queue.Args] struct {
	// Job is the stored job.
	Job *queue.Job
	// Args is the job's args decoded into T.
	Args T
}

// Expected is one job RequireManyInserted expects: its kind and, if not
// nil, what else it must match.
type Expected struct {
	Kind  string
	Match *Match
}

// RequireInserted asserts that exactly one job of T's kind matching m
// (nil matches any) was enqueued through db, a pool or a transaction (in
// which it sees jobs the transaction enqueued and has not committed yet),
// and returns it with its args decoded. It fails t otherwise, listing the
// jobs that were enqueued. T's zero value must report the kind (a value
// receiver). It takes the same db as RequireNotInserted and
// RequireManyInserted.
func RequireInserted[T queue.Args](ctx context.Context, t TestingT, db pgqueue.DB, m *Match) *Inserted[T] {
	t.Helper()
	return requireInserted[T](ctx, t, db, m)
}

// RequireInsertedTx is RequireInserted inside tx: it sees jobs that tx
// enqueued and has not committed yet. RequireInserted takes a transaction
// too; this name stays for the code that calls it.
func RequireInsertedTx[T queue.Args](ctx context.Context, t TestingT, tx pgx.Tx, m *Match) *Inserted[T] {
	t.Helper()
	return requireInserted[T](ctx, t, tx, m)
}

func requireInserted[T queue.Args](ctx context.Context, t TestingT, db pgqueue.DB, m *Match) *Inserted[T] {
	t.Helper()
	var zero T
	kind := zero.Kind()
	all := listJobs(ctx, t, db)
	found := matching(all, kind, m)
	switch len(found) {
	case 1:
	case 0:
		t.Fatalf("jobfencetest: no job of kind %q%s was enqueued; enqueued: %s", kind, m.describe(), describeJobs(all))
		return nil
	default:
		t.Fatalf("jobfencetest: %d jobs of kind %q%s were enqueued, want exactly one (narrow it with a Match): %s",
			len(found), kind, m.describe(), describeJobs(found))
		return nil
	}
	var args T
	if err := json.Unmarshal(found[0].EncodedArgs, &args); err != nil {
		t.Fatalf("jobfencetest: job %d of kind %q: args %s do not decode into %T: %v", found[0].ID, kind, found[0].EncodedArgs, args, err)
		return nil
	}
	return &Inserted[T]{Job: found[0], Args: args}
}

// RequireNotInserted asserts that no job of T's kind matching m (nil
// matches any) was enqueued through db, a pool or a transaction. It fails
// t otherwise, listing the jobs it found.
func RequireNotInserted[T queue.Args](ctx context.Context, t TestingT, db pgqueue.DB, m *Match) {
	t.Helper()
	var zero T
	kind := zero.Kind()
	if found := matching(listJobs(ctx, t, db), kind, m); len(found) > 0 {
		t.Fatalf("jobfencetest: want no job of kind %q%s, found %d: %s", kind, m.describe(), len(found), describeJobs(found))
	}
}

// RequireManyInserted asserts that the jobs of the kinds in want, in the
// order they were enqueued through db (a pool or a transaction), are
// exactly want: the same kinds in the same order, each matching its
// Match. Jobs of other kinds are ignored. It returns the jobs, in order;
// it fails t otherwise, listing the jobs of those kinds it found.
func RequireManyInserted(ctx context.Context, t TestingT, db pgqueue.DB, want []Expected) []*queue.Job {
	t.Helper()
	if len(want) == 0 {
		t.Fatalf("jobfencetest: RequireManyInserted: want is empty; use RequireNotInserted to assert that nothing was enqueued")
		return nil
	}
	kinds := map[string]bool{}
	for i, e := range want {
		if e.Kind == "" {
			t.Fatalf("jobfencetest: RequireManyInserted: want[%d] has no Kind", i)
			return nil
		}
		kinds[e.Kind] = true
	}
	var got []*queue.Job
	for _, j := range listJobs(ctx, t, db) {
		if kinds[j.Kind] {
			got = append(got, j)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("jobfencetest: want %d jobs (%s), %d were enqueued: %s", len(want), describeExpected(want), len(got), describeJobs(got))
		return nil
	}
	for i, e := range want {
		if got[i].Kind != e.Kind || !e.Match.matches(got[i]) {
			t.Fatalf("jobfencetest: job %d of %d: want kind %q%s, got %s; all: %s",
				i+1, len(want), e.Kind, e.Match.describe(), describeJob(got[i]), describeJobs(got))
			return nil
		}
	}
	return got
}

// listJobs returns every stored job, oldest first.
func listJobs(ctx context.Context, t TestingT, db pgqueue.DB) []*queue.Job {
	t.Helper()
	jobs, err := pgqueue.ListIn(ctx, db, pgqueue.ListParams{Limit: maxListed})
	if err != nil {
		t.Fatalf("jobfencetest: read the enqueued jobs: %v", err)
		return nil
	}
	for i, j := 0, len(jobs)-1; i < j; i, j = i+1, j-1 {
		jobs[i], jobs[j] = jobs[j], jobs[i]
	}
	return jobs
}

func matching(jobs []*queue.Job, kind string, m *Match) []*queue.Job {
	var out []*queue.Job
	for _, j := range jobs {
		if j.Kind == kind && m.matches(j) {
			out = append(out, j)
		}
	}
	return out
}

func (m *Match) matches(j *queue.Job) bool {
	if m == nil {
		return true
	}
	return (m.Queue == "" || m.Queue == j.Queue) &&
		(m.Priority == 0 || m.Priority == j.Priority) &&
		(m.UniqueKey == "" || m.UniqueKey == j.UniqueKey) &&
		(m.ScheduledAt.IsZero() || m.ScheduledAt.Truncate(time.Microsecond).Equal(j.ScheduledAt.Truncate(time.Microsecond))) &&
		(m.MaxAttempts == 0 || m.MaxAttempts == j.MaxAttempts) &&
		(m.State == "" || m.State == j.State)
}

// describe renders m's set fields as " with queue=... priority=...".
func (m *Match) describe() string {
	if m == nil {
		return ""
	}
	var parts []string
	add := func(set bool, name string, v any) {
		if set {
			parts = append(parts, fmt.Sprintf("%s=%v", name, v))
		}
	}
	add(m.Queue != "", "queue", m.Queue)
	add(m.Priority != 0, "priority", m.Priority)
	add(m.UniqueKey != "", "unique_key", m.UniqueKey)
	add(!m.ScheduledAt.IsZero(), "scheduled_at", m.ScheduledAt.UTC().Format(time.RFC3339Nano))
	add(m.MaxAttempts != 0, "max_attempts", m.MaxAttempts)
	add(m.State != "", "state", m.State)
	if len(parts) == 0 {
		return ""
	}
	return " with " + strings.Join(parts, " ")
}

func describeJob(j *queue.Job) string {
	s := fmt.Sprintf("#%d %s queue=%s priority=%d state=%s scheduled_at=%s max_attempts=%d args=%s",
		j.ID, j.Kind, j.Queue, j.Priority, j.State, j.ScheduledAt.UTC().Format(time.RFC3339Nano), j.MaxAttempts, j.EncodedArgs)
	if j.UniqueKey != "" {
		s += " unique_key=" + j.UniqueKey
	}
	return s
}

func describeJobs(jobs []*queue.Job) string {
	if len(jobs) == 0 {
		return "none"
	}
	var b strings.Builder
	for _, j := range jobs {
		b.WriteString("\n\t")
		b.WriteString(describeJob(j))
	}
	return b.String()
}

func describeExpected(want []Expected) string {
	parts := make([]string, len(want))
	for i, e := range want {
		parts[i] = e.Kind + e.Match.describe()
	}
	return strings.Join(parts, ", ")
}
