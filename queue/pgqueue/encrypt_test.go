package pgqueue_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// encKey is a 32-byte test key of b.
func encKey(b byte) []byte { return bytes.Repeat([]byte{b}, queue.KeySize) }

func newRing(t *testing.T, current string, keys ...string) *queue.KeyRing {
	t.Helper()
	m := map[string][]byte{}
	for i, k := range keys {
		m[k] = encKey(byte('A' + i))
	}
	r, err := queue.NewKeyRing(queue.Encryption{Keys: m, Current: current, MACKey: keys[0]})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// storedArgs is the args column of job id, as PostgreSQL holds it, from
// whichever table holds the job.
func storedArgs(t *testing.T, db *pgtest.DB, id int64) string {
	t.Helper()
	var s string
	err := db.Pool.QueryRow(context.Background(), `SELECT args::text FROM jobfence_jobs WHERE id = $1
		UNION ALL SELECT args::text FROM jobfence_jobs_finished WHERE id = $1`, id).Scan(&s)
	if err != nil {
		t.Fatalf("args of job %d: %v", id, err)
	}
	return s
}

// TestEncryptedArgsOnEveryInsertPath: the args of a job that asks for
// encryption are stored sealed under the current key by every insert path
// (one insert plain, keyed, hashed, debounced, in a transaction; a batch's
// COPY, keyed and hashed rows; a workflow's task): the database holds no
// plaintext, and the claimed job's args open to it. A job that does not
// ask is stored as given.
func TestEncryptedArgsOnEveryInsertPath(t *testing.T) {
	db := pgtest.New(t)
	r := newRing(t, "k1", "k1")
	c := pgqueue.New(db.Pool, pgqueue.Config{Encryption: r})
	ctx := context.Background()
	secret := func(n int) []byte { return fmt.Appendf(nil, `{"card":"4111-%04d"}`, n) }
	var ids []int64
	var want [][]byte
	one := []queue.EnqueueParams{
		{Kind: "pay", Args: secret(1), Encrypt: true},
		{Kind: "pay", Args: secret(2), Encrypt: true, UniqueKey: "u1"},
		{Kind: "pay", Args: secret(3), Encrypt: true, Unique: &queue.UniqueOpts{ByArgs: true}},
		{Kind: "pay", Args: secret(4), Encrypt: true, Unique: &queue.UniqueOpts{ByArgs: true, Debounce: true}},
		{Kind: "pay", Args: secret(5), Encrypt: true, ScheduledAt: time.Now().Add(-time.Second)},
	}
	for i, p := range one {
		res, err := c.Enqueue(ctx, p)
		if err != nil || !res.Inserted {
			t.Fatalf("insert %d: %+v, %v", i, res, err)
		}
		ids, want = append(ids, res.ID), append(want, p.Args)
	}
	tx, err := db.Pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.EnqueueTx(ctx, tx, queue.EnqueueParams{Kind: "pay", Args: secret(6), Encrypt: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	ids, want = append(ids, res.ID), append(want, secret(6))
	many := []queue.EnqueueParams{
		{Kind: "pay", Args: secret(7), Encrypt: true},
		{Kind: "pay", Args: secret(8), Encrypt: true, UniqueKey: "u8"},
		{Kind: "pay", Args: secret(9), Encrypt: true, Unique: &queue.UniqueOpts{ByArgs: true}},
		{Kind: "pay", Args: secret(10), Encrypt: true, Unique: &queue.UniqueOpts{ByArgs: true, Debounce: true}},
	}
	if n, err := c.EnqueueMany(ctx, many); err != nil || n != 4 {
		t.Fatalf("EnqueueMany: %d, %v", n, err)
	}
	wf, err := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "enc", Tasks: []queue.WorkflowTask{
		{Name: "a", Params: queue.EnqueueParams{Kind: "pay", Args: secret(11), Encrypt: true}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	plain, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "pay", Args: []byte(`{"card":"none"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if s := storedArgs(t, db, plain.ID); s != `{"card": "none"}` {
		t.Errorf("a job that did not ask is stored %s", s)
	}
	jobs := claim(t, c, "default", 100, time.Minute)
	if len(jobs) != 12 {
		t.Fatalf("claimed %d jobs, want 12", len(jobs))
	}
	byID := map[int64]*queue.Job{}
	for _, j := range jobs {
		byID[j.ID] = j
		if j.ID == plain.ID {
			continue
		}
		s := storedArgs(t, db, j.ID)
		if !strings.HasPrefix(s, `"`+queue.SealedPrefix+`k1:`) || strings.Contains(s, "4111") {
			t.Errorf("job %d is stored %s: want sealed under k1, no plaintext", j.ID, s)
		}
		got, err := r.Open(j.Kind, j.EncodedArgs)
		if err != nil || !bytes.Contains(got, []byte("4111-")) {
			t.Errorf("job %d opens to %s, %v", j.ID, got, err)
		}
	}
	for i, id := range ids {
		got, err := r.Open("pay", byID[id].EncodedArgs)
		if err != nil || !bytes.Equal(got, want[i]) {
			t.Errorf("insert %d opens to %s, %v; want %s", i, got, err, want[i])
		}
	}
	if got, err := r.Open("pay", byID[wf.Tasks["a"]].EncodedArgs); err != nil || !bytes.Equal(got, secret(11)) {
		t.Errorf("the task opens to %s, %v", got, err)
	}
}

// TestEncryptWithoutKeyRefused: a job that asks for encryption, inserted
// by a client without a key ring, is refused with a clear error on every
// insert path, and nothing is stored.
func TestEncryptWithoutKeyRefused(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	p := queue.EnqueueParams{Kind: "pay", Args: []byte(`{"card":"4111"}`), Encrypt: true}
	want := `jobfence: args of kind "pay": the args ask to be encrypted (EncryptedArgs or EnqueueParams.Encrypt) but the client has no encryption keys (Config.Encryption); nothing was inserted`
	_, err1 := c.Enqueue(ctx, p)
	_, err2 := c.EnqueueMany(ctx, []queue.EnqueueParams{p})
	_, err3 := c.InsertWorkflow(ctx, queue.WorkflowParams{Name: "enc", Tasks: []queue.WorkflowTask{{Name: "a", Params: p}}})
	for i, err := range []error{err1, err2, err3} {
		if !errors.Is(err, queue.ErrEncryptionKey) || !strings.Contains(err.Error(), want) {
			t.Errorf("insert path %d: err = %v, want %q", i, err, want)
		}
	}
	var n int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%d jobs stored (%v), want none", n, err)
	}
}

// TestEncryptedUniqueByArgs: unique by args holds for encrypted jobs:
// equal args inserted by clients whose current keys differ (one before a
// rotation, one after) but share the MAC key are duplicates, different
// args are not, and the stored hash is not the plain SHA-256 of the args.
func TestEncryptedUniqueByArgs(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	before := pgqueue.New(db.Pool, pgqueue.Config{Encryption: newRing(t, "k1", "k1", "k2")})
	after := pgqueue.New(db.Pool, pgqueue.Config{Encryption: newRing(t, "k2", "k1", "k2")})
	p := queue.EnqueueParams{Kind: "pay", Args: []byte(`{"order":7}`), Encrypt: true, Unique: &queue.UniqueOpts{ByArgs: true}}
	first, err := before.Enqueue(ctx, p)
	if err != nil || !first.Inserted {
		t.Fatalf("first: %+v, %v", first, err)
	}
	dup, err := after.Enqueue(ctx, p)
	if err != nil || dup.Inserted || dup.ID != first.ID {
		t.Fatalf("a duplicate under the next key: %+v, %v; want refused by job %d", dup, err, first.ID)
	}
	if n, err := after.EnqueueMany(ctx, []queue.EnqueueParams{p}); err != nil || n != 0 {
		t.Fatalf("a duplicate in a batch: %d, %v; want none inserted", n, err)
	}
	other := p
	other.Args = []byte(`{"order":8}`)
	if res, err := after.Enqueue(ctx, other); err != nil || !res.Inserted {
		t.Fatalf("other args: %+v, %v", res, err)
	}
	plainHash, err := p.UniqueHash(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var stored []byte
	if err := db.Pool.QueryRow(ctx, `SELECT unique_hash FROM jobfence_jobs WHERE id = $1`, first.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(stored, plainHash) {
		t.Error("the stored unique hash is the plain SHA-256 of the args")
	}
}

// TestSearchSkipsEncryptedArgs: a search by args cannot see into sealed
// args: it finds the plain job and not the encrypted one with the same
// args.
func TestSearchSkipsEncryptedArgs(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Encryption: newRing(t, "k1", "k1")})
	args := []byte(`{"customer":"c1"}`)
	plain, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Args: args})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "k", Args: args, Encrypt: true}); err != nil {
		t.Fatal(err)
	}
	jobs, err := c.List(ctx, pgqueue.ListParams{Args: args})
	if err != nil || len(jobs) != 1 || jobs[0].ID != plain.ID {
		t.Fatalf("search found %d jobs (%v), want the plain one alone", len(jobs), err)
	}
}

// TestRotateEncryption: RotateEncryption re-seals, in bounded batches, the
// args of live and finished jobs sealed under an old key, reporting its
// progress; the args open to the same plaintext; a second pass rewrites
// nothing; a run resumed from a cursor reads only the jobs after it; args
// under a key the ring lacks are skipped and named.
func TestRotateEncryption(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	old := pgqueue.New(db.Pool, pgqueue.Config{Encryption: newRing(t, "k1", "k1")})
	if _, err := old.MaintainFinished(ctx, time.Hour); err != nil {
		t.Fatal(err)
	}
	const n = 40
	var ps []queue.EnqueueParams
	for i := range n {
		ps = append(ps, queue.EnqueueParams{Kind: "pay", Queue: "rot", Args: fmt.Appendf(nil, `{"i":%d}`, i), Encrypt: true})
	}
	ps = append(ps, queue.EnqueueParams{Kind: "pay", Queue: "rot", Args: []byte(`{"plain":true}`)})
	if _, err := old.EnqueueMany(ctx, ps); err != nil {
		t.Fatal(err)
	}
	// A few complete: they move to the finished table.
	for _, j := range claim(t, old, "rot", 10, time.Minute) {
		if err := old.Complete(ctx, j.Lease()); err != nil {
			t.Fatal(err)
		}
	}
	var finished int
	if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM jobfence_jobs_finished`).Scan(&finished); err != nil || finished == 0 {
		t.Fatalf("%d finished jobs (%v): the test needs some", finished, err)
	}
	// One job sealed under a key the rotating ring lacks.
	lost := pgqueue.New(db.Pool, pgqueue.Config{Encryption: newRing(t, "k0", "k0")})
	lostJob, err := lost.Enqueue(ctx, queue.EnqueueParams{Kind: "pay", Queue: "rot", Args: []byte(`{"lost":1}`), Encrypt: true})
	if err != nil {
		t.Fatal(err)
	}
	r2 := newRing(t, "k2", "k1", "k2")
	c := pgqueue.New(db.Pool, pgqueue.Config{Encryption: r2})
	var calls []pgqueue.RotateProgress
	p, err := c.RotateEncryption(ctx, pgqueue.RotateOpts{Batch: 7, Progress: func(p pgqueue.RotateProgress) { calls = append(calls, p) }})
	if err != nil {
		t.Fatal(err)
	}
	if p.Rewritten != n || p.Scanned != n+2 || p.Skipped != 1 || len(p.MissingKeys) != 1 || p.MissingKeys[0] != "k0" || p.Cursor != lostJob.ID {
		t.Fatalf("progress %+v: want %d rewritten of %d, 1 skipped under k0, cursor %d", p, n, n+2, lostJob.ID)
	}
	if len(calls) < (n+2)/7 {
		t.Errorf("%d progress calls for %d jobs in batches of 7", len(calls), n+2)
	}
	rows, err := db.Pool.Query(ctx, `SELECT id, kind, args::text FROM jobfence_jobs UNION ALL SELECT id, kind, args::text FROM jobfence_jobs_finished`)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for rows.Next() {
		var id int64
		var kind, args string
		if err := rows.Scan(&id, &kind, &args); err != nil {
			t.Fatal(err)
		}
		key, sealed := queue.SealedKey([]byte(args))
		switch {
		case id == lostJob.ID:
			if key != "k0" {
				t.Errorf("the job under the missing key is now under %q", key)
			}
		case !sealed:
			if args != `{"plain": true}` {
				t.Errorf("job %d: plain args became %s", id, args)
			}
		default:
			seen++
			plain, err := r2.Open(kind, []byte(args))
			if key != "k2" || err != nil || !bytes.HasPrefix(plain, []byte(`{"i":`)) {
				t.Errorf("job %d: under %q, opens to %s, %v", id, key, plain, err)
			}
		}
	}
	rows.Close()
	if seen != n {
		t.Fatalf("%d jobs under k2, want %d", seen, n)
	}
	again, err := c.RotateEncryption(ctx, pgqueue.RotateOpts{})
	if err != nil || again.Rewritten != 0 {
		t.Fatalf("second pass: %+v, %v; want nothing rewritten", again, err)
	}
	resumed, err := c.RotateEncryption(ctx, pgqueue.RotateOpts{After: lostJob.ID - 1})
	if err != nil || resumed.Scanned != 1 {
		t.Fatalf("resumed before the last job: %+v, %v; want one job read", resumed, err)
	}
	_, err = pgqueue.New(db.Pool, pgqueue.Config{}).RotateEncryption(ctx, pgqueue.RotateOpts{})
	if !errors.Is(err, queue.ErrEncryptionKey) || !strings.Contains(err.Error(), "the client has no key ring (Config.Encryption)") {
		t.Fatalf("rotate without a ring: %v", err)
	}
}
