package jobfence_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/internal/logbuf"
	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// card is an args type whose jobs are stored encrypted.
type card struct {
	Number string `json:"number"`
	N      int    `json:"n"`
}

func (card) Kind() string      { return "card" }
func (card) EncryptArgs() bool { return true }

// encKeys returns an Encryption of 32-byte keys, each made of one letter
// (so that a test can look for them in text), the current one first in
// ids and the MAC key pinned to "k1".
func encKeys(current string, ids ...string) *jobfence.Encryption {
	m := map[string][]byte{}
	for _, id := range ids {
		m[id] = bytes.Repeat([]byte{'K' + byte(len(m))}, queue.KeySize)
	}
	return &jobfence.Encryption{Keys: m, Current: current, MACKey: ids[0]}
}

// TestEncryptedArgsRoundTrip: a Client with Config.Encryption stores a
// card's args sealed (the database holds no plaintext) and its handler
// gets the plaintext; Config.Encryption is validated at NewClient.
func TestEncryptedArgsRoundTrip(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	got := make(chan card, 1)
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, j *jobfence.Job[card]) error {
		got <- j.Args
		return nil
	})
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 2}, Handlers: reg, Encryption: encKeys("k1", "k1")})
	res, err := c.Insert(context.Background(), card{Number: "4111-1111", N: 1}, nil)
	if err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := db.Pool.QueryRow(context.Background(), `SELECT args::text FROM jobfence_jobs WHERE id = $1`, res.ID).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(stored, "4111") || !strings.Contains(stored, queue.SealedPrefix+"k1:") {
		t.Fatalf("stored args %s: want them sealed under k1", stored)
	}
	start(t, c)
	select {
	case a := <-got:
		if a.Number != "4111-1111" || a.N != 1 {
			t.Fatalf("the handler got %+v", a)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the job did not run in 15 s")
	}
	waitState(t, c, res.ID, queue.StateCompleted)

	bad := encKeys("k1", "k1")
	bad.Keys["k1"] = bad.Keys["k1"][:31]
	_, err = jobfence.NewClient(db.Pool, jobfence.Config{Encryption: bad})
	if err == nil || !strings.Contains(err.Error(), `jobfence: new client: jobfence: invalid encryption config: key "k1" is 31 bytes; AES-256 needs exactly 32`) {
		t.Fatalf("a short key: %v", err)
	}
	_, err = jobfence.NewClient(db.Pool, jobfence.Config{Encryption: encKeys("k1", "k1"), PGQueue: pgqueue.Config{Encryption: &queue.KeyRing{}}})
	if err == nil || !strings.Contains(err.Error(), "set Config.Encryption, not PGQueue.Encryption or Worker.Encryption") {
		t.Fatalf("two rings: %v", err)
	}
}

// TestEncryptedArgsWithoutTheKey: a worker whose ring lacks the job's key
// (or that has no ring) never runs the handler: each attempt fails with an
// error that names the key, into the retry policy, and the logs show
// neither key bytes nor the plaintext; a worker given the key then runs it.
func TestEncryptedArgsWithoutTheKey(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	ins := newClient(t, db.Pool, jobfence.Config{Encryption: encKeys("k1", "k1")})
	res, err := ins.Insert(ctx, card{Number: "4111-2222"}, &jobfence.InsertOpts{MaxAttempts: 5})
	if err != nil {
		t.Fatal(err)
	}
	var ran atomic.Int32
	handler := func(ctx context.Context, j *jobfence.Job[card]) error {
		if j.Args.Number != "4111-2222" {
			t.Errorf("the handler got %+v", j.Args)
		}
		ran.Add(1)
		return nil
	}
	for i, enc := range []*jobfence.Encryption{encKeys("k9", "k9"), nil} {
		logs := &logbuf.Buffer{}
		reg := jobfence.NewRegistry()
		jobfence.AddHandler(reg, handler)
		w := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 1}, Handlers: reg, Encryption: enc,
			Logger: slog.New(slog.NewTextHandler(logs, nil))})
		start(t, w)
		j := waitState(t, w, res.ID, queue.StateRetryable)
		if err := w.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		want := `args of kind "card" encrypted with key "k1": the key ring lacks that key (it holds k9)`
		if enc == nil {
			want = `args of kind "card" encrypted with key "k1": this process has no encryption keys configured`
		}
		if len(j.Errors) != i+1 || !strings.Contains(j.Errors[i].Error, want) {
			t.Fatalf("worker %d: errors %+v, want the last to contain %q", i, j.Errors, want)
		}
		text := logs.String()
		if !strings.Contains(text, "job args cannot be decrypted") {
			t.Errorf("worker %d logged %q, want the failure", i, text)
		}
		if strings.Contains(text, "KKKKKKKK") || strings.Contains(text, "4111") {
			t.Errorf("worker %d's logs show a key or the plaintext: %q", i, text)
		}
		// Ready again at once, for the next worker.
		if err := ins.Retry(ctx, res.ID); err != nil {
			t.Fatal(err)
		}
	}
	if ran.Load() != 0 {
		t.Fatal("a handler ran without the key")
	}
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, handler)
	w := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 1}, Handlers: reg, Encryption: encKeys("k9", "k1", "k9")})
	start(t, w)
	waitState(t, w, res.ID, queue.StateCompleted)
	if ran.Load() != 1 {
		t.Fatalf("the handler ran %d times", ran.Load())
	}
}

// TestRotateWhileTheFleetRuns: jobs sealed under k1 are worked by a client
// whose ring holds k1 and k2 while RotateEncryption re-seals them under k2
// in small batches: every job runs once with its own args, and none is
// left under k1.
func TestRotateWhileTheFleetRuns(t *testing.T) {
	t.Parallel()
	db := pgtest.New(t)
	ctx := context.Background()
	old := newClient(t, db.Pool, jobfence.Config{Encryption: encKeys("k1", "k1")})
	const n = 300
	cards := make([]jobfence.InsertManyParams, n)
	for i := range cards {
		cards[i] = jobfence.InsertManyParams{Args: card{Number: "n", N: i}}
	}
	if _, err := old.InsertMany(ctx, cards); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	seen := map[int]int{}
	reg := jobfence.NewRegistry()
	jobfence.AddHandler(reg, func(ctx context.Context, j *jobfence.Job[card]) error {
		mu.Lock()
		seen[j.Args.N]++
		mu.Unlock()
		return nil
	})
	c := newClient(t, db.Pool, jobfence.Config{Queues: map[string]int{"default": 4}, Handlers: reg, Encryption: encKeys("k2", "k1", "k2")})
	start(t, c)
	p, err := c.PGQueue().RotateEncryption(ctx, pgqueue.RotateOpts{Batch: 10})
	if err != nil || p.Skipped != 0 && len(p.MissingKeys) > 0 {
		t.Fatalf("rotate: %+v, %v", p, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		done := len(seen)
		mu.Unlock()
		if done == n {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs ran in 20 s", done, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	for i, k := range seen {
		if k != 1 || i < 0 || i >= n {
			t.Errorf("job %d ran %d times", i, k)
		}
	}
	mu.Unlock()
	// A second pass finds whatever moved meanwhile; then nothing is left
	// under k1.
	if _, err := c.PGQueue().RotateEncryption(ctx, pgqueue.RotateOpts{}); err != nil {
		t.Fatal(err)
	}
	var left int
	err = db.Pool.QueryRow(ctx, `SELECT count(*) FROM (SELECT args FROM jobfence_jobs UNION ALL SELECT args FROM jobfence_jobs_finished) a
		WHERE args #>> '{}' LIKE $1`, queue.SealedPrefix+"k1:%").Scan(&left)
	if err != nil || left != 0 {
		t.Fatalf("%d jobs left under k1 (%v)", left, err)
	}
}
