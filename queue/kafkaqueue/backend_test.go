package kafkaqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
)

// claimN claims from b until n jobs were handed out or the timeout passes.
func claimN(t *testing.T, b *Backend, q string, n int, timeout time.Duration) []*queue.Job {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	wake, err := b.Wake(ctx, q)
	if err != nil {
		t.Fatal(err)
	}
	var jobs []*queue.Job
	for len(jobs) < n {
		js, err := b.Claim(ctx, queue.ClaimParams{Queue: q, Limit: n - len(jobs), WorkerID: "w1"})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, js...)
		if len(jobs) >= n {
			break
		}
		select {
		case <-wake:
		case <-ctx.Done():
			t.Fatalf("claimed %d jobs of %d in %v", len(jobs), n, timeout)
		}
	}
	return jobs
}

func TestClaimCompleteCommits(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 2, topic)
	cl := newTestClient(t, c)
	ctx := context.Background()
	var batch []EnqueueJob
	for i := range 20 {
		batch = append(batch, EnqueueJob{
			Params:       queue.EnqueueParams{Queue: topic, Kind: "email", Args: []byte(fmt.Sprintf(`{"n":%d}`, i)), MaxAttempts: 7},
			PartitionKey: "user-" + strconv.Itoa(i),
		})
	}
	if err := cl.EnqueueMany(ctx, batch); err != nil {
		t.Fatal(err)
	}
	group := uniqueName("g")
	cfg := c.config(group, topic)
	cfg.ConcurrencyPerPartition = 100
	b, err := NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	jobs := claimN(t, b, topic, 20, time.Minute)
	gen := b.Assignment().Generation
	if gen <= 0 {
		t.Fatalf("Assignment().Generation = %d after jobs were claimed", gen)
	}
	seen := map[string]bool{}
	for _, j := range jobs {
		var args struct{ N int }
		if err := json.Unmarshal(j.EncodedArgs, &args); err != nil {
			t.Fatalf("job %d args %q: %v", j.ID, j.EncodedArgs, err)
		}
		if j.Kind != "email" || j.Queue != topic || j.Attempt != 1 || j.MaxAttempts != 7 || j.Fence != gen || j.State != queue.StateRunning {
			t.Fatalf("job %+v: want kind email, queue %s, attempt 1 of 7, fence %d, running", j, topic, gen)
		}
		if !strings.HasPrefix(j.Key, "kafka:"+topic+":") || j.IdempotencyKey() != j.Key || seen[j.Key] {
			t.Fatalf("job key %q: want a unique kafka:%s:<partition>:<offset>", j.Key, topic)
		}
		if len(j.AttemptedBy) != 1 || j.AttemptedBy[0] != "w1" {
			t.Fatalf("AttemptedBy = %v", j.AttemptedBy)
		}
		seen[j.Key] = true
	}
	// Heartbeat keeps every lease while the generation lasts.
	var leases []queue.Lease
	for _, j := range jobs {
		leases = append(leases, j.Lease())
	}
	lost, err := b.Heartbeat(ctx, leases, time.Minute)
	if err != nil || len(lost) != 0 {
		t.Fatalf("Heartbeat = %v, %v; want no lost leases", lost, err)
	}
	// A wrong fence is stale and changes nothing.
	wrong := queue.Finish{Lease: queue.Lease{ID: jobs[0].ID, Fence: gen - 1}, Outcome: queue.OutcomeComplete}
	stale, err := b.Finish(ctx, []queue.Finish{wrong})
	if err != nil || len(stale) != 1 || stale[0] != wrong.Lease {
		t.Fatalf("Finish with fence %d = %v, %v; want it stale", gen-1, stale, err)
	}
	var fs []queue.Finish
	for _, j := range jobs {
		fs = append(fs, queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete})
	}
	stale, err = b.Finish(ctx, fs)
	if err != nil || len(stale) != 0 {
		t.Fatalf("Finish = %v, %v", stale, err)
	}
	// Finishing twice is stale: the claim is over.
	stale, err = b.Finish(ctx, fs[:1])
	if err != nil || len(stale) != 1 {
		t.Fatalf("second Finish = %v, %v; want it stale", stale, err)
	}
	// Without SyncCommit, Finish asks the background committer to commit
	// at once and returns: the offsets land just after it (reading them
	// right away failed about once in a hundred runs).
	waitCommitted(t, c, group, topic, 2)
}

func TestSameKeyRunsInOrder(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 1, topic)
	cl := newTestClient(t, c)
	ctx := context.Background()
	const perKey = 30
	keys := []string{"a", "b", "c", "d"}
	var batch []EnqueueJob
	for i := range perKey {
		for _, k := range keys {
			batch = append(batch, EnqueueJob{
				Params:       queue.EnqueueParams{Queue: topic, Kind: "step", Args: []byte(fmt.Sprintf(`{"key":%q,"seq":%d}`, k, i))},
				PartitionKey: k,
			})
		}
	}
	if err := cl.EnqueueMany(ctx, batch); err != nil {
		t.Fatal(err)
	}
	cfg := c.config(uniqueName("g"), topic)
	cfg.ConcurrencyPerPartition = 16
	cfg.InPlaceRetries = 3

	var mu sync.Mutex
	next := map[string]int{}
	running := map[string]bool{}
	maxAtOnce, atOnce := 0, 0
	failed := map[string]bool{}
	var violations []string
	m := startMember(t, "m1", cfg, topic, 16, func(ctx context.Context, j *queue.Job) queue.Finish {
		var a struct {
			Key string
			Seq int
		}
		_ = json.Unmarshal(j.EncodedArgs, &a)
		mu.Lock()
		if running[a.Key] {
			violations = append(violations, fmt.Sprintf("%s/%d ran while another job of its key ran", a.Key, a.Seq))
		}
		if a.Seq != next[a.Key] {
			violations = append(violations, fmt.Sprintf("%s/%d ran when %d was next", a.Key, a.Seq, next[a.Key]))
		}
		running[a.Key] = true
		atOnce++
		maxAtOnce = max(maxAtOnce, atOnce)
		// Every fifth job fails once: the in-place retry keeps its key's order.
		fail := a.Seq%5 == 0 && !failed[string(j.Key)]
		failed[string(j.Key)] = true
		mu.Unlock()
		time.Sleep(time.Millisecond)
		mu.Lock()
		running[a.Key] = false
		atOnce--
		if !fail {
			next[a.Key]++
		}
		mu.Unlock()
		if fail {
			return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeRetry, Delay: 5 * time.Millisecond,
				Error: &queue.AttemptError{Error: "transient"}}
		}
		return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete}
	})
	testwatch.WaitFor(t, time.Minute, "every job done", func() bool {
		m.checkErrs(t)
		mu.Lock()
		defer mu.Unlock()
		for _, k := range keys {
			if next[k] < perKey {
				return false
			}
		}
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	if len(violations) > 0 {
		t.Fatalf("order violations: %v", violations)
	}
	if maxAtOnce < 2 || maxAtOnce > len(keys) {
		t.Fatalf("at most %d jobs ran at once; want between 2 and %d (one per key)", maxAtOnce, len(keys))
	}
}

func TestPoisonJobGoesToDeadLetterTopic(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 2, topic)
	cl := newTestClient(t, c)
	ctx := context.Background()
	if err := cl.Enqueue(ctx, queue.EnqueueParams{Queue: topic, Kind: "poison", Args: []byte(`{"id":1}`), MaxAttempts: 4},
		EnqueueOptions{PartitionKey: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := cl.Enqueue(ctx, queue.EnqueueParams{Queue: topic, Kind: "bad-input", Args: []byte(`{"id":2}`)},
		EnqueueOptions{PartitionKey: "q"}); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := cl.Enqueue(ctx, queue.EnqueueParams{Queue: topic, Kind: "flaky", Args: []byte(fmt.Sprintf(`{"id":%d}`, 100+i))}); err != nil {
			t.Fatal(err)
		}
	}
	group := uniqueName("g")
	cfg := c.config(group, topic)
	cfg.InPlaceRetries = 1
	cfg.RetryDelay = 100 * time.Millisecond
	cfg.ConcurrencyPerPartition = 4

	var mu sync.Mutex
	attempts := map[string][]int{} // kind -> attempts seen
	keys := map[string]map[string]bool{}
	flakyDone := 0
	m := startMember(t, "m1", cfg, topic, 8, func(ctx context.Context, j *queue.Job) queue.Finish {
		mu.Lock()
		defer mu.Unlock()
		attempts[j.Kind] = append(attempts[j.Kind], j.Attempt)
		if keys[j.Kind] == nil {
			keys[j.Kind] = map[string]bool{}
		}
		keys[j.Kind][j.Key] = true
		switch j.Kind {
		case "poison":
			return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeRetry, Delay: 10 * time.Millisecond,
				Error: &queue.AttemptError{Attempt: j.Attempt, At: time.Now(), Error: "boom " + strconv.Itoa(j.Attempt)}}
		case "bad-input":
			return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeDiscard,
				Error: &queue.AttemptError{Attempt: j.Attempt, At: time.Now(), Error: "invalid input"}}
		}
		// flaky: fails its first two attempts, so it passes through the retry topic.
		if j.Attempt < 3 {
			return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeRetry, Error: &queue.AttemptError{Error: "not yet"}}
		}
		flakyDone++
		return queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete}
	})
	dead := readAll(t, c, topic+DefaultDeadLetterTopicSuffix, 2, 2)
	testwatch.WaitFor(t, time.Minute, "flaky jobs done", func() bool {
		m.checkErrs(t)
		mu.Lock()
		defer mu.Unlock()
		return flakyDone == 10
	})
	byKind := map[string]map[string]string{}
	for _, d := range dead {
		h := map[string]string{}
		for _, x := range d.Headers {
			h[x.Key] = string(x.Value)
		}
		byKind[h[HeaderKind]] = h
		if string(d.Key) != map[string]string{"poison": "p", "bad-input": "q"}[h[HeaderKind]] {
			t.Errorf("dead letter of %s has key %q", h[HeaderKind], d.Key)
		}
	}
	p := byKind["poison"]
	if p == nil || p[HeaderError] != "boom 4" || p[HeaderAttempt] != "4" || p[HeaderOutcome] != "retry" || p[HeaderQueue] != topic {
		t.Fatalf("poison dead letter headers %v: want error \"boom 4\", attempt 4, outcome retry, queue %s", p, topic)
	}
	o, err := ParseOrigin(p[HeaderOrigin])
	if err != nil || o.Topic != topic {
		t.Fatalf("origin %q: %v", p[HeaderOrigin], err)
	}
	var errs []queue.AttemptError
	if err := json.Unmarshal([]byte(p[HeaderErrors]), &errs); err != nil || len(errs) != 4 || errs[0].Error != "boom 1" {
		t.Fatalf("errors header %q (%v): want the 4 attempts' errors", p[HeaderErrors], err)
	}
	bad := byKind["bad-input"]
	if bad == nil || bad[HeaderError] != "invalid input" || bad[HeaderOutcome] != "discard" || bad[HeaderAttempt] != "1" {
		t.Fatalf("discarded dead letter headers %v", bad)
	}
	mu.Lock()
	defer mu.Unlock()
	// Attempts 1 and 2 in place, 3 from the retry topic, 4 in place again.
	if got := fmt.Sprint(attempts["poison"]); got != "[1 2 3 4]" {
		t.Fatalf("poison attempts %s, want [1 2 3 4]", got)
	}
	if len(keys["poison"]) != 1 {
		t.Fatalf("poison job had keys %v: want one idempotency key across the retry topic", keys["poison"])
	}
	if !keys["poison"][o.Key()] {
		t.Fatalf("poison job keys %v do not include its origin's key %s", keys["poison"], o.Key())
	}
	waitCommitted(t, c, group, topic, 2)
	waitCommitted(t, c, group, topic+DefaultRetryTopicSuffix, 2)
}
