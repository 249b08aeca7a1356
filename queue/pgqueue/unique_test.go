package pgqueue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/scheduler"
)

// billArgs has a field that makes its jobs unique and one that does
// not.
type billArgs struct {
	Customer int    `json:"customer" unique:"true"`
	Note     string `json:"note"`
}

func (billArgs) Kind() string { return "bill" }

// syncArgs has no tagged field: ByArgs takes every field.
type syncArgs struct {
	Account int    `json:"account"`
	Reason  string `json:"reason"`
}

func (syncArgs) Kind() string { return "sync" }

// setState puts job id in state st, as a worker, a rescuer or an admin
// would have.
func setState(t *testing.T, c *pgqueue.Client, id int64, st queue.State) {
	t.Helper()
	if _, err := c.Pool().Exec(context.Background(), `UPDATE jobfence_jobs SET state = $2 WHERE id = $1`, id, st); err != nil {
		t.Fatal(err)
	}
}

// countKind counts the stored jobs of kind k.
func countKind(t *testing.T, c *pgqueue.Client, k string) int {
	t.Helper()
	var n int
	if err := c.Pool().QueryRow(context.Background(), `SELECT count(*) FROM jobfence_jobs WHERE kind = $1`, k).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// race inserts p 50 times at once through clients, 5 inserts each, and
// returns the results.
func race(t *testing.T, clients []*pgqueue.Client, p queue.EnqueueParams) []queue.EnqueueResult {
	t.Helper()
	results := make([]queue.EnqueueResult, 50)
	errs := make([]error, 50)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			results[i], errs[i] = clients[i%len(clients)].Enqueue(context.Background(), p)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	return results
}

// TestUniqueRace puts a job in each state, then races 50 inserts of a
// duplicate from 10 connections: in a state the job refuses duplicates in
// (the unfinished ones by default; completed too when ByState says so),
// every insert returns the existing job and its state and nothing is
// inserted; in a state it does not refuse in (completed, discarded,
// cancelled by default), exactly one insert makes a new job and the others
// return it. Without a stored job, exactly one of the 50 inserts.
func TestUniqueRace(t *testing.T) {
	c, db := newClient(t)
	var clients []*pgqueue.Client
	for range 10 {
		clients = append(clients, pgqueue.New(db.NewPool(t, 1), pgqueue.Config{}))
	}
	withCompleted := append(queue.UniqueUnfinished(), queue.StateCompleted)
	cases := []struct {
		state   queue.State // "" for none stored
		byState []queue.State
		refused bool
	}{
		{"", nil, false},
		{queue.StateAvailable, nil, true},
		{queue.StateScheduled, nil, true},
		{queue.StateRunning, nil, true},
		{queue.StateRetryable, nil, true},
		{queue.StateCompleted, nil, false},
		{queue.StateDiscarded, nil, false},
		{queue.StateCancelled, nil, false},
		{queue.StateCompleted, withCompleted, true},
		{queue.StateDiscarded, withCompleted, false},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d", tc.state, len(tc.byState)), func(t *testing.T) {
			kind := fmt.Sprintf("race-%d", i)
			p := queue.EnqueueParams{Kind: kind, Args: []byte(`{"account": 7}`),
				Unique: &queue.UniqueOpts{ByArgs: true, ByState: tc.byState}}
			var existing int64
			if tc.state != "" {
				res, err := c.Enqueue(context.Background(), p)
				if err != nil || !res.Inserted || res.State != queue.StateAvailable {
					t.Fatalf("first insert: %+v %v", res, err)
				}
				existing = res.ID
				setState(t, c, existing, tc.state)
			}
			results := race(t, clients, p)
			inserted := 0
			for _, r := range results {
				if r.Inserted {
					inserted++
				}
			}
			switch {
			case tc.refused:
				for i, r := range results {
					if r.Inserted || r.ID != existing || r.State != tc.state {
						t.Fatalf("insert %d = %+v, want the existing job %d in state %s", i, r, existing, tc.state)
					}
				}
				if n := countKind(t, c, kind); n != 1 {
					t.Fatalf("%d jobs stored, want 1", n)
				}
			default:
				if inserted != 1 {
					t.Fatalf("%d of 50 inserts inserted, want 1", inserted)
				}
				for i, r := range results {
					if r.ID != results[0].ID || r.ID == existing || r.State != queue.StateAvailable {
						t.Fatalf("insert %d = %+v, want the one new job %d, available", i, r, results[0].ID)
					}
				}
				want := 1
				if tc.state != "" {
					want = 2
				}
				if n := countKind(t, c, kind); n != want {
					t.Fatalf("%d jobs stored, want %d", n, want)
				}
			}
		})
	}
}

// TestUniqueKeyRefusesInEveryState: a UniqueKey, as a cron fire's
// (scheduler.UniqueKey), refuses a duplicate also after its job finished,
// until the job is deleted: one job per fire, ever. The same insert with
// UniqueOpts would insert again.
func TestUniqueKeyRefusesInEveryState(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	key := scheduler.UniqueKey("nightly", time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC))
	p := queue.EnqueueParams{Kind: "nightly", UniqueKey: key}
	first, err := c.Enqueue(ctx, p)
	if err != nil || !first.Inserted {
		t.Fatalf("first: %+v %v", first, err)
	}
	jobs := claim(t, c, queue.DefaultQueue, 1, time.Minute)
	if len(jobs) != 1 {
		t.Fatalf("claimed %d jobs, want 1", len(jobs))
	}
	if err := c.Complete(ctx, jobs[0].Lease()); err != nil {
		t.Fatal(err)
	}
	for _, st := range []queue.State{queue.StateCompleted, queue.StateDiscarded, queue.StateCancelled} {
		setState(t, c, first.ID, st)
		again, err := c.Enqueue(ctx, p)
		if err != nil || again.Inserted || again.ID != first.ID || again.State != st {
			t.Fatalf("insert of the fire's key with its job %s = %+v %v, want job %d refusing it", st, again, err, first.ID)
		}
	}
	if n := countKind(t, c, "nightly"); n != 1 {
		t.Fatalf("%d jobs of the fire, want 1", n)
	}
}

// TestUniqueByPeriod: with ByPeriod an hour, jobs scheduled at 10:20 and
// 10:50 are duplicates and one at 11:05 is not.
func TestUniqueByPeriod(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	day := time.Now().UTC().AddDate(0, 0, 2).Truncate(24 * time.Hour)
	ins := func(h, m int) queue.EnqueueResult {
		t.Helper()
		res, err := c.Insert(ctx, syncArgs{Account: 1}, &queue.InsertOpts{ScheduledAt: day.Add(time.Duration(h)*time.Hour + time.Duration(m)*time.Minute),
			Unique: &queue.UniqueOpts{ByArgs: true, ByPeriod: time.Hour}})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	a := ins(10, 20)
	b := ins(10, 50)
	d := ins(11, 5)
	if !a.Inserted || a.State != queue.StateScheduled {
		t.Fatalf("10:20: %+v, want inserted, scheduled", a)
	}
	if b.Inserted || b.ID != a.ID || b.State != queue.StateScheduled {
		t.Fatalf("10:50: %+v, want job %d of 10:20's hour", b, a.ID)
	}
	if !d.Inserted || d.ID == a.ID {
		t.Fatalf("11:05: %+v, want a new job", d)
	}
}

// TestUniqueByQueue: the same args in two queues are duplicates unless
// ByQueue.
func TestUniqueByQueue(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	for _, byQueue := range []bool{false, true} {
		u := &queue.UniqueOpts{ByArgs: true, ByQueue: byQueue}
		args := syncArgs{Account: 2, Reason: fmt.Sprint(byQueue)}
		a, err := c.Insert(ctx, args, &queue.InsertOpts{Queue: "a", Unique: u})
		if err != nil || !a.Inserted {
			t.Fatalf("queue a: %+v %v", a, err)
		}
		b, err := c.Insert(ctx, args, &queue.InsertOpts{Queue: "b", Unique: u})
		if err != nil {
			t.Fatal(err)
		}
		if b.Inserted != byQueue {
			t.Fatalf("ByQueue %v: insert in queue b = %+v, want inserted %v", byQueue, b, byQueue)
		}
	}
}

// TestUniqueByArgsAndFields: ByArgs takes every field of an untagged
// type and only the tagged fields of a type that tags some; the order of
// an untyped insert's JSON keys does not matter; without ByArgs the kind
// alone is the key.
func TestUniqueByArgsAndFields(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	byArgs := &queue.InsertOpts{Unique: &queue.UniqueOpts{ByArgs: true}}
	ins := func(args queue.Args, o *queue.InsertOpts) queue.EnqueueResult {
		t.Helper()
		res, err := c.Insert(ctx, args, o)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	first := ins(billArgs{Customer: 1, Note: "a"}, byArgs)
	if r := ins(billArgs{Customer: 1, Note: "b"}, byArgs); r.Inserted || r.ID != first.ID {
		t.Fatalf("same tagged field, other note: %+v, want job %d", r, first.ID)
	}
	if r := ins(billArgs{Customer: 2, Note: "a"}, byArgs); !r.Inserted {
		t.Fatalf("other tagged field: %+v, want inserted", r)
	}
	s1 := ins(syncArgs{Account: 1, Reason: "a"}, byArgs)
	if r := ins(syncArgs{Account: 1, Reason: "b"}, byArgs); !r.Inserted || r.ID == s1.ID {
		t.Fatalf("untagged type, other reason: %+v, want inserted", r)
	}
	if r := ins(syncArgs{Account: 1, Reason: "a"}, byArgs); r.Inserted || r.ID != s1.ID {
		t.Fatalf("untagged type, same args: %+v, want job %d", r, s1.ID)
	}
	kindOnly := &queue.InsertOpts{Unique: &queue.UniqueOpts{}}
	k := ins(syncArgs{Account: 5}, kindOnly)
	if r := ins(syncArgs{Account: 6}, kindOnly); r.Inserted || r.ID != k.ID {
		t.Fatalf("kind alone, other args: %+v, want job %d", r, k.ID)
	}
	fields := &queue.InsertOpts{Unique: &queue.UniqueOpts{ByFields: []string{"reason"}}}
	f := ins(syncArgs{Account: 8, Reason: "x"}, fields)
	if r := ins(syncArgs{Account: 9, Reason: "x"}, fields); r.Inserted || r.ID != f.ID {
		t.Fatalf("ByFields reason, other account: %+v, want job %d", r, f.ID)
	}

	u := &queue.UniqueOpts{ByArgs: true}
	a, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "raw", Args: []byte(`{"a": 1, "b": {"y": 2, "x": 3}}`), Unique: u})
	if err != nil || !a.Inserted {
		t.Fatalf("raw: %+v %v", a, err)
	}
	b, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "raw", Args: []byte(`{"b":{"x":3,"y":2},"a":1}`), Unique: u})
	if err != nil || b.Inserted || b.ID != a.ID {
		t.Fatalf("raw, keys reordered: %+v %v, want job %d", b, err, a.ID)
	}
}

// TestUniqueValidation: bad UniqueOpts are refused with a message that
// says what is wrong, and nothing is stored.
func TestUniqueValidation(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	cases := []struct {
		name string
		args queue.Args
		o    *queue.InsertOpts
		want string
	}{
		{"lacks running", syncArgs{}, &queue.InsertOpts{Unique: &queue.UniqueOpts{ByState: []queue.State{queue.StateAvailable, queue.StateScheduled, queue.StateRetryable}}},
			"jobfence: invalid enqueue params: Unique.ByState must hold available, scheduled, running and retryable (a job moves between them without an insert, and could not refuse a duplicate again once back in one it left); it lacks running"},
		{"final only", syncArgs{}, &queue.InsertOpts{Unique: &queue.UniqueOpts{ByState: []queue.State{queue.StateCompleted}}},
			"it lacks available, scheduled, running, retryable"},
		{"unknown state", syncArgs{}, &queue.InsertOpts{Unique: &queue.UniqueOpts{ByState: []queue.State{"done"}}},
			`jobfence: invalid enqueue params: Unique.ByState has jobfence: unknown job state "done": want one of available, scheduled, running, retryable, completed, discarded, cancelled`},
		{"key and unique", syncArgs{}, &queue.InsertOpts{UniqueKey: "k", Unique: &queue.UniqueOpts{}},
			"jobfence: invalid enqueue params: Unique cannot be combined with UniqueKey: set one"},
		{"no such field", billArgs{}, &queue.InsertOpts{Unique: &queue.UniqueOpts{ByFields: []string{"Customer"}}},
			`jobfence: invalid enqueue params: Unique.ByFields names "Customer", which is no field of the args of kind "bill" (its fields: customer, note)`},
		{"negative period", syncArgs{}, &queue.InsertOpts{Unique: &queue.UniqueOpts{ByPeriod: -time.Second}},
			"jobfence: invalid enqueue params: Unique.ByPeriod is negative"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Insert(ctx, tc.args, tc.o)
			var ipe *queue.InvalidParamsError
			if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.As(err, &ipe) {
				t.Fatalf("err = %v, want an InvalidParamsError containing %q", err, tc.want)
			}
		})
	}
	_, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "raw", Args: []byte(`[1, 2]`), Unique: &queue.UniqueOpts{ByFields: []string{"a"}}})
	if want := "Unique.ByFields needs args that are a JSON object"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("ByFields of an array: %v, want %q", err, want)
	}
	if n := countKind(t, c, "sync") + countKind(t, c, "bill") + countKind(t, c, "raw"); n != 0 {
		t.Fatalf("refused inserts stored %d jobs", n)
	}
}

// TestUniqueDebounce: a debounced duplicate of a job that has not started
// moves it to the new insert's time (later, or now, which makes it
// available) and returns it; once the job runs, a duplicate is refused
// and the job left alone.
func TestUniqueDebounce(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	u := &queue.UniqueOpts{ByArgs: true, Debounce: true}
	scheduledAt := func(id int64) time.Time {
		t.Helper()
		j, err := c.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j.ScheduledAt
	}
	in := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	first, err := c.Insert(ctx, syncArgs{Account: 3}, &queue.InsertOpts{ScheduledAt: in, Unique: u})
	if err != nil || !first.Inserted || first.Debounced || first.State != queue.StateScheduled {
		t.Fatalf("first: %+v %v", first, err)
	}
	later := in.Add(time.Hour)
	moved, err := c.Insert(ctx, syncArgs{Account: 3}, &queue.InsertOpts{ScheduledAt: later, Unique: u})
	if err != nil || moved.Inserted || !moved.Debounced || moved.ID != first.ID || moved.State != queue.StateScheduled {
		t.Fatalf("debounced insert: %+v %v, want job %d moved", moved, err, first.ID)
	}
	if got := scheduledAt(first.ID); !got.Equal(later) {
		t.Fatalf("job scheduled at %v, want %v", got, later)
	}
	now, err := c.Insert(ctx, syncArgs{Account: 3}, &queue.InsertOpts{Unique: u})
	if err != nil || !now.Debounced || now.ID != first.ID || now.State != queue.StateAvailable {
		t.Fatalf("debounced insert for now: %+v %v, want job %d available", now, err, first.ID)
	}
	if got := scheduledAt(first.ID); !got.Before(in) {
		t.Fatalf("job scheduled at %v, want now", got)
	}
	jobs := claim(t, c, queue.DefaultQueue, 1, time.Minute)
	if len(jobs) != 1 || jobs[0].ID != first.ID {
		t.Fatalf("claimed %v, want job %d", jobs, first.ID)
	}
	ranAt := scheduledAt(first.ID)
	refused, err := c.Insert(ctx, syncArgs{Account: 3}, &queue.InsertOpts{ScheduledAt: later, Unique: u})
	if err != nil || refused.Inserted || refused.Debounced || refused.ID != first.ID || refused.State != queue.StateRunning {
		t.Fatalf("debounced insert beside the running job: %+v %v, want it refused", refused, err)
	}
	if got := scheduledAt(first.ID); !got.Equal(ranAt) {
		t.Fatalf("running job moved to %v", got)
	}
	if n := countKind(t, c, "sync"); n != 1 {
		t.Fatalf("%d jobs, want 1", n)
	}
}

// TestUniqueEnqueueMany: a batch refuses a job whose key a stored job
// holds and a second job of the batch with a key the first took; a
// debounced job of a batch moves its stored duplicate.
func TestUniqueEnqueueMany(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	u := &queue.UniqueOpts{ByArgs: true}
	stored, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "m", Args: []byte(`{"n": 0}`), Unique: u})
	if err != nil {
		t.Fatal(err)
	}
	in := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	deb, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "d", ScheduledAt: in, Unique: &queue.UniqueOpts{Debounce: true}})
	if err != nil {
		t.Fatal(err)
	}
	later := in.Add(time.Hour)
	n, err := c.EnqueueMany(ctx, []queue.EnqueueParams{
		{Kind: "m", Args: []byte(`{"n": 0}`), Unique: u}, // the stored job's
		{Kind: "m", Args: []byte(`{"n": 1}`), Unique: u},
		{Kind: "m", Args: []byte(`{"n": 1}`), Unique: u}, // the one before's
		{Kind: "m", Args: []byte(`{"n": 2}`), Unique: u},
		{Kind: "plain"},
		{Kind: "d", ScheduledAt: later, Unique: &queue.UniqueOpts{Debounce: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if n != 3 {
		t.Fatalf("inserted %d, want 3 (n=1, n=2, plain)", n)
	}
	if got := countKind(t, c, "m"); got != 3 {
		t.Fatalf("%d jobs of kind m, want 3", got)
	}
	if got := countKind(t, c, "d"); got != 1 {
		t.Fatalf("%d jobs of kind d, want 1", got)
	}
	j, err := c.Get(ctx, deb.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !j.ScheduledAt.Equal(later) {
		t.Fatalf("debounced job at %v, want %v", j.ScheduledAt, later)
	}
	again, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "m", Args: []byte(`{"n": 0}`), Unique: u})
	if err != nil || again.ID != stored.ID {
		t.Fatalf("%+v %v, want job %d", again, err, stored.ID)
	}
}

// TestUniqueRetryHeld: a finished job whose key a newer duplicate holds is
// not retried beside it: Retry says so (ErrUniqueHeld), RetryMatching
// passes it over; once the newer job has finished, it is retried.
func TestUniqueRetryHeld(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	p := queue.EnqueueParams{Kind: "r", Unique: &queue.UniqueOpts{}}
	old, err := c.Enqueue(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	setState(t, c, old.ID, queue.StateDiscarded)
	newer, err := c.Enqueue(ctx, p)
	if err != nil || !newer.Inserted {
		t.Fatalf("newer: %+v %v", newer, err)
	}
	err = c.Retry(ctx, old.ID)
	want := fmt.Sprintf("pgqueue: retry job %d: jobfence: another job holds the job's unique key; retrying it would run a duplicate", old.ID)
	if !errors.Is(err, pgqueue.ErrUniqueHeld) || err.Error() != want {
		t.Fatalf("Retry = %v, want %q", err, want)
	}
	n, err := c.RetryMatching(ctx, pgqueue.BulkParams{Kind: "r", State: queue.StateDiscarded})
	if err != nil || n != 0 {
		t.Fatalf("RetryMatching = %d, %v; want 0 retried", n, err)
	}
	setState(t, c, newer.ID, queue.StateCompleted)
	if err := c.Retry(ctx, old.ID); err != nil {
		t.Fatalf("Retry once the newer job completed: %v", err)
	}
}

// TestUniqueKeyOfTheArgsType: uniqueness given by the args type's
// InsertOpts applies to every insert, and a UniqueKey at the call replaces
// it.
func TestUniqueKeyOfTheArgsType(t *testing.T) {
	c, _ := newClient(t)
	ctx := context.Background()
	a, err := c.Insert(ctx, uniqueByType{ID: 1}, nil)
	if err != nil || !a.Inserted {
		t.Fatalf("%+v %v", a, err)
	}
	b, err := c.Insert(ctx, uniqueByType{ID: 1}, nil)
	if err != nil || b.Inserted || b.ID != a.ID {
		t.Fatalf("duplicate: %+v %v, want job %d", b, err, a.ID)
	}
	k, err := c.Insert(ctx, uniqueByType{ID: 1}, &queue.InsertOpts{UniqueKey: "own"})
	if err != nil || !k.Inserted {
		t.Fatalf("with a UniqueKey of the call: %+v %v", k, err)
	}
}

type uniqueByType struct {
	ID int `json:"id"`
}

func (uniqueByType) Kind() string { return "by-type" }

func (uniqueByType) InsertOpts() queue.InsertOpts {
	return queue.InsertOpts{Unique: &queue.UniqueOpts{ByArgs: true}}
}

// TestStateBitsMatchTheDatabase: every state has a bit of its own, and
// the database's jobfence_state_in_bitmask reads each state's bit as Go
// writes it, and no other. A state added without its bit on both sides
// (a unique job in it would refuse no duplicate) fails here.
func TestStateBitsMatchTheDatabase(t *testing.T) {
	_, db := newClient(t)
	ctx := context.Background()
	seen := map[int16]queue.State{}
	for _, s := range queue.States() {
		bit := queue.StateBitmask([]queue.State{s})
		if bit == 0 || bit&(bit-1) != 0 {
			t.Fatalf("state %s has bitmask %b, want one bit", s, bit)
		}
		if other, ok := seen[bit]; ok {
			t.Fatalf("states %s and %s share bit %b", s, other, bit)
		}
		seen[bit] = s
		for _, o := range queue.States() {
			var in bool
			if err := db.Pool.QueryRow(ctx, `SELECT jobfence_state_in_bitmask($1, $2)`, bit, string(o)).Scan(&in); err != nil {
				t.Fatal(err)
			}
			if in != (o == s) {
				t.Fatalf("jobfence_state_in_bitmask(%b, %s) = %v, want %v", bit, o, in, o == s)
			}
		}
	}
}
