package queue_test

import (
	"bytes"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// hash is p's unique hash at now.
func hash(t *testing.T, p queue.EnqueueParams, now time.Time) []byte {
	t.Helper()
	h, err := p.UniqueHash(now)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// TestUniqueHashParts: each part UniqueOpts names changes the key, and
// what it does not name does not.
func TestUniqueHashParts(t *testing.T) {
	now := time.Date(2026, 11, 26, 10, 20, 0, 0, time.UTC)
	base := queue.EnqueueParams{Kind: "k", Queue: "q", Args: []byte(`{"a": 1, "b": 2}`)}
	with := func(u queue.UniqueOpts, f func(*queue.EnqueueParams)) queue.EnqueueParams {
		p := base
		p.Unique = &u
		if f != nil {
			f(&p)
		}
		return p
	}
	cases := []struct {
		name string
		a, b queue.EnqueueParams
		same bool
	}{
		{"kind counts", with(queue.UniqueOpts{}, nil), with(queue.UniqueOpts{}, func(p *queue.EnqueueParams) { p.Kind = "other" }), false},
		{"args ignored without ByArgs", with(queue.UniqueOpts{}, nil), with(queue.UniqueOpts{}, func(p *queue.EnqueueParams) { p.Args = []byte(`{"a": 9}`) }), true},
		{"args count with ByArgs", with(queue.UniqueOpts{ByArgs: true}, nil), with(queue.UniqueOpts{ByArgs: true}, func(p *queue.EnqueueParams) { p.Args = []byte(`{"a": 9, "b": 2}`) }), false},
		{"key order ignored", with(queue.UniqueOpts{ByArgs: true}, nil), with(queue.UniqueOpts{ByArgs: true}, func(p *queue.EnqueueParams) { p.Args = []byte(`{"b":2,"a":1}`) }), true},
		{"other fields ignored with ByFields", with(queue.UniqueOpts{ByFields: []string{"a"}}, nil), with(queue.UniqueOpts{ByFields: []string{"a"}}, func(p *queue.EnqueueParams) { p.Args = []byte(`{"a": 1, "b": 3}`) }), true},
		{"absent field differs from null", with(queue.UniqueOpts{ByFields: []string{"c"}}, nil), with(queue.UniqueOpts{ByFields: []string{"c"}}, func(p *queue.EnqueueParams) { p.Args = []byte(`{"c": null}`) }), false},
		{"queue ignored without ByQueue", with(queue.UniqueOpts{}, nil), with(queue.UniqueOpts{}, func(p *queue.EnqueueParams) { p.Queue = "r" }), true},
		{"queue counts with ByQueue", with(queue.UniqueOpts{ByQueue: true}, nil), with(queue.UniqueOpts{ByQueue: true}, func(p *queue.EnqueueParams) { p.Queue = "r" }), false},
		{"states do not count", with(queue.UniqueOpts{}, nil), with(queue.UniqueOpts{ByState: append(queue.UniqueUnfinished(), queue.StateCompleted)}, nil), true},
		{"same period", with(queue.UniqueOpts{ByPeriod: time.Hour}, nil), with(queue.UniqueOpts{ByPeriod: time.Hour}, func(p *queue.EnqueueParams) { p.ScheduledAt = now.Add(39 * time.Minute) }), true},
		{"next period", with(queue.UniqueOpts{ByPeriod: time.Hour}, nil), with(queue.UniqueOpts{ByPeriod: time.Hour}, func(p *queue.EnqueueParams) { p.ScheduledAt = now.Add(40 * time.Minute) }), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := bytes.Equal(hash(t, tc.a, now), hash(t, tc.b, now)); got != tc.same {
				t.Fatalf("same key = %v, want %v", got, tc.same)
			}
		})
	}
}

// TestUniqueHashPeriodBeforeEpoch: a time before 1970 falls in the period
// that starts before it, not after.
func TestUniqueHashPeriodBeforeEpoch(t *testing.T) {
	p := queue.EnqueueParams{Kind: "k", Unique: &queue.UniqueOpts{ByPeriod: time.Hour}}
	at := func(s string) queue.EnqueueParams {
		q := p
		q.ScheduledAt, _ = time.Parse(time.RFC3339, s)
		return q
	}
	if !bytes.Equal(hash(t, at("1969-12-31T22:10:00Z"), time.Time{}), hash(t, at("1969-12-31T22:50:00Z"), time.Time{})) {
		t.Fatal("22:10 and 22:50 of 1969-12-31 are in different hours")
	}
	if bytes.Equal(hash(t, at("1969-12-31T22:50:00Z"), time.Time{}), hash(t, at("1969-12-31T23:10:00Z"), time.Time{})) {
		t.Fatal("22:50 and 23:10 of 1969-12-31 are in the same hour")
	}
}

// TestStateBitmask: each state's fixed bit, as jobfence_state_in_bitmask
// reads it.
func TestStateBitmask(t *testing.T) {
	if got := queue.StateBitmask(queue.UniqueUnfinished()); got != 0b1111 {
		t.Fatalf("unfinished = %b, want 1111", got)
	}
	if got := queue.StateBitmask([]queue.State{queue.StateCancelled, queue.StateCompleted}); got != 0b1010000 {
		t.Fatalf("cancelled, completed = %b, want 1010000", got)
	}
}

type typedUnique struct{}

func (typedUnique) Kind() string { return "typed-unique" }

func (typedUnique) InsertOpts() queue.InsertOpts {
	return queue.InsertOpts{Unique: &queue.UniqueOpts{ByArgs: true}}
}

// TestUniqueMerge: uniqueness is one setting: a UniqueKey or Unique at
// the call replaces the type's, and a call that sets neither takes it.
func TestUniqueMerge(t *testing.T) {
	p, err := queue.Params(typedUnique{}, nil)
	if err != nil || p.Unique == nil || !p.Unique.ByArgs || p.UniqueKey != "" {
		t.Fatalf("no call options: %+v %v", p, err)
	}
	p, err = queue.Params(typedUnique{}, &queue.InsertOpts{UniqueKey: "k"})
	if err != nil || p.Unique != nil || p.UniqueKey != "k" {
		t.Fatalf("UniqueKey at the call: %+v %v", p, err)
	}
	o := queue.InsertOpts{Unique: &queue.UniqueOpts{ByQueue: true}}.Merge(queue.InsertOpts{UniqueKey: "type"})
	if o.UniqueKey != "" || o.Unique == nil || !o.Unique.ByQueue {
		t.Fatalf("Unique at the call over a type's UniqueKey: %+v", o)
	}
}
