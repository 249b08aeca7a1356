package kafkaqueue

import (
	"context"
	"log/slog"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// TestCloseWaitsForBackgroundGoroutines shows that once Close returns, the
// committer and the writer retrying a dead letter the broker refuses have
// returned: neither can touch the group or the producer afterwards.
func TestCloseWaitsForBackgroundGoroutines(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 1, topic)
	setMaxMessageBytes(t, c, topic+DefaultDeadLetterTopicSuffix, 1000)
	cl := newTestClient(t, c)
	ctx := context.Background()
	big := `{"pad":"` + strings.Repeat("x", 4000) + `"}`
	if err := cl.EnqueueMany(ctx, []EnqueueJob{
		{Params: queue.EnqueueParams{Queue: topic, Kind: "done"}},
		{Params: queue.EnqueueParams{Queue: topic, Kind: "dead", Args: []byte(big)}},
	}); err != nil {
		t.Fatal(err)
	}
	cfg := c.config(uniqueName("g"), topic)
	cfg.ConcurrencyPerPartition = 2
	cfg.CommitInterval = time.Millisecond // the committer is busy when Close comes
	logs := newErrorLog()
	cfg.Logger = slog.New(logs)
	b, err := NewBackend(cfg)
	if err != nil {
		t.Fatal(err)
	}
	jobs := claimN(t, b, topic, 2, time.Minute)
	var fs []queue.Finish
	var dead string
	for _, j := range jobs {
		f := queue.Finish{Lease: j.Lease(), Outcome: queue.OutcomeComplete}
		if j.Kind == "dead" {
			f.Outcome, dead = queue.OutcomeDiscard, j.Key
		}
		fs = append(fs, f)
	}
	if stale, err := b.Finish(ctx, fs); err != nil || len(stale) != 0 {
		t.Fatalf("Finish = %v, %v", stale, err)
	}
	waitFor(t, time.Minute, "a failed dead-letter write logged", func() bool { return logs.count(dead) >= 1 })
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	// run itself may still be returning: Close waits until it closed done.
	for _, fn := range []string{"(*Backend).commitLoop", "(*Backend).retryHandOff"} {
		if strings.Contains(stacks, fn) {
			t.Errorf("%s still runs after Close returned", fn)
		}
	}
}
