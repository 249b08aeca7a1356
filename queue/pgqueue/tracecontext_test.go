package pgqueue_test

import (
	"context"
	"maps"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestTraceparentStoredPacked: a traceparent a hook adds is stored in the
// trace_context column, 26 bytes, by every enqueue path, and comes back
// in the claimed job's metadata as the text it was, beside the job's own
// metadata; one that does not have W3C's printed shape stays in the jsonb
// as it was.
func TestTraceparentStoredPacked(t *testing.T) {
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	const packed = "000af7651916cd43dd8448eb211c80319cb7ad6b716920333101"
	_, db := newClient(t)
	hook := func(ctx context.Context, ps []queue.EnqueueParams) (context.Context, map[string]string, func(int64, error)) {
		return ctx, map[string]string{"traceparent": tp}, func(int64, error) {}
	}
	c := pgqueue.New(db.Pool, pgqueue.Config{InsertHook: hook})
	ctx := context.Background()
	own := map[string]string{"tenant": "t1"}
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "single"}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "single-own", Metadata: own}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.EnqueueMany(ctx, []queue.EnqueueParams{
		{Kind: "copy"},
		{Kind: "copy-own", Metadata: own},
		{Kind: "unique", UniqueKey: "u1"},
		{Kind: "unique-own", UniqueKey: "u2", Metadata: own},
	}); err != nil {
		t.Fatal(err)
	}
	// A client without the hook, and a traceparent of the caller's own that
	// does not pack (upper-case hex): kept as given.
	plain := pgqueue.New(db.Pool, pgqueue.Config{})
	upper := map[string]string{"traceparent": "00-0AF7651916CD43DD8448EB211C80319C-B7AD6B7169203331-01"}
	if _, err := plain.Enqueue(ctx, queue.EnqueueParams{Kind: "upper", Metadata: upper}); err != nil {
		t.Fatal(err)
	}
	if _, err := plain.Enqueue(ctx, queue.EnqueueParams{Kind: "none"}); err != nil {
		t.Fatal(err)
	}

	traced := map[string]string{"traceparent": tp}
	tracedOwn := map[string]string{"traceparent": tp, "tenant": "t1"}
	want := map[string]struct {
		stored, packed string
		meta           map[string]string
	}{
		"single":     {`{}`, packed, traced},
		"single-own": {`{"tenant": "t1"}`, packed, tracedOwn},
		"copy":       {`{}`, packed, traced},
		"copy-own":   {`{"tenant": "t1"}`, packed, tracedOwn},
		"unique":     {`{}`, packed, traced},
		"unique-own": {`{"tenant": "t1"}`, packed, tracedOwn},
		"upper":      {`{"traceparent": "` + upper["traceparent"] + `"}`, "", upper},
		"none":       {`{}`, "", nil},
	}
	rows, err := db.Pool.Query(ctx, `SELECT kind, metadata::text, coalesce(encode(trace_context, 'hex'), '') FROM jobfence_jobs`)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for rows.Next() {
		var kind, stored, packed string
		if err := rows.Scan(&kind, &stored, &packed); err != nil {
			t.Fatal(err)
		}
		n++
		if w := want[kind]; stored != w.stored || packed != w.packed {
			t.Errorf("%s stored metadata %s and trace_context %q, want %s and %q", kind, stored, packed, w.stored, w.packed)
		}
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Fatalf("%d jobs stored, want %d", n, len(want))
	}
	jobs, err := c.Claim(ctx, queue.ClaimParams{Queue: "default", Limit: 20, Lease: time.Minute, WorkerID: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != len(want) {
		t.Fatalf("claimed %d jobs, want %d", len(jobs), len(want))
	}
	for _, j := range jobs {
		if w := want[j.Kind]; !maps.Equal(j.Metadata, w.meta) {
			t.Errorf("%s claimed with metadata %v, want %v", j.Kind, j.Metadata, w.meta)
		}
	}
}
