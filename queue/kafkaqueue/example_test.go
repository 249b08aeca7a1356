package kafkaqueue_test

import (
	"context"
	"log"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/kafkaqueue"
	"github.com/jobfence/jobfence/worker"
)

type SendEmail struct {
	To string `json:"to"`
}

func (SendEmail) Kind() string { return "send_email" }

// Enqueue jobs to the topic "emails" with the recipient as partition key,
// and run them with the worker runtime on a consumer group.
func Example() {
	ctx := context.Background()
	cfg := kafkaqueue.Config{
		Brokers: []string{"localhost:9092"},
		GroupID: "email-workers",
		Topics:  []string{"emails"}, // also consumes emails.retry, writes emails.dlq
	}

	client, err := kafkaqueue.NewClient(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	err = client.Insert(ctx, SendEmail{To: "ada@example.com"}, &queue.InsertOpts{Queue: "emails"},
		kafkaqueue.EnqueueOptions{PartitionKey: "ada@example.com"})
	if err != nil {
		log.Fatal(err)
	}

	backend, err := kafkaqueue.NewBackend(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer backend.Close()
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[SendEmail]) error {
		// job.Fence is the consumer-group generation; job.IdempotencyKey()
		// is "kafka:emails:<partition>:<offset>".
		return nil
	})
	w, err := worker.New(backend, reg, worker.Config{Queues: map[string]int{"emails": 16}})
	if err != nil {
		log.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		log.Fatal(err)
	}
	defer w.Stop(ctx)
}

// Move the dead letters of the queue "emails" back to run again, once the
// bug that failed them is fixed.
func ExampleClient_Redrive() {
	ctx := context.Background()
	client, err := kafkaqueue.NewClient(kafkaqueue.Config{Brokers: []string{"localhost:9092"}})
	if err != nil {
		log.Fatal(err)
	}
	defer client.Close()
	moved, err := client.Redrive(ctx, "emails", kafkaqueue.RedriveOptions{})
	if err != nil {
		log.Fatalf("moved %d dead letters, then: %v", moved, err)
	}
	log.Printf("moved %d dead letters of emails back to emails.retry", moved)
}
