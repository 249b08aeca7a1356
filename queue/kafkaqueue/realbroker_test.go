package kafkaqueue

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jobfence/jobfence/queue"
)

type greeting struct {
	Name string `json:"name"`
}

func (greeting) Kind() string { return "greet" }

// TestRealBroker runs a typed job through a real broker. The other tests
// also run against it when KAFKA_BROKERS is set, and against an in-process
// broker otherwise.
func TestRealBroker(t *testing.T) {
	if os.Getenv("KAFKA_BROKERS") == "" {
		t.Skip("KAFKA_BROKERS is not set: the other tests ran against the in-process kfake broker; set KAFKA_BROKERS=host:port to run them all against a real one")
	}
	testInsertClaimComplete(t)
}

// TestInsertTypedArgs runs a typed job through the broker at hand.
func TestInsertTypedArgs(t *testing.T) { testInsertClaimComplete(t) }

func testInsertClaimComplete(t *testing.T) {
	topic := uniqueName("jobs")
	c := newCluster(t, 3, topic)
	cl := newTestClient(t, c)
	ctx := context.Background()
	if err := cl.Insert(ctx, greeting{Name: "ada"}, &queue.InsertOpts{Queue: topic, MaxAttempts: 2}, EnqueueOptions{PartitionKey: "ada"}); err != nil {
		t.Fatal(err)
	}
	group := uniqueName("g")
	b, err := NewBackend(c.config(group, topic))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	jobs := claimN(t, b, topic, 1, time.Minute)
	j := jobs[0]
	if j.Kind != "greet" || string(j.EncodedArgs) != `{"name":"ada"}` || j.MaxAttempts != 2 || j.Fence != b.Assignment().Generation {
		t.Fatalf("job %+v (args %s): want kind greet, args {\"name\":\"ada\"}, 2 attempts, the current generation as fence", j, j.EncodedArgs)
	}
	stale, err := b.Finish(ctx, []queue.Finish{{Lease: j.Lease(), Outcome: queue.OutcomeComplete}})
	if err != nil || len(stale) != 0 {
		t.Fatalf("Finish = %v, %v", stale, err)
	}
	// The background committer commits at once, just after Finish
	// returns (see TestClaimCompleteCommits).
	waitCommitted(t, c, group, topic, 3)
}
