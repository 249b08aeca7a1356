package jobfence_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jobfence/jobfence"
	"github.com/jobfence/jobfence/internal/pgtest"
)

// benchCard is BenchmarkEncryptedInsertRun's args: about 200 bytes of
// JSON, encrypted where the benchmark's client names its kind
// (Encryption.Kinds): an args type that asks for encryption itself
// (EncryptArgs) is refused by a client without keys.
type benchCard struct {
	Customer string `json:"customer"`
	Card     string `json:"card"`
	Note     string `json:"note"`
}

func (benchCard) Kind() string { return "bench_card" }

// BenchmarkEncryptedInsertRun measures one job's insert (one Insert, its
// own round trip) and run (claim, open, handler, completion) on one
// client, with and without a key ring: plain stores the args as JSON,
// encrypted seals them (AES-256-GCM) at insert and opens them in the
// worker. Run the two alternately (docs/benchmarks/encryption.md).
func BenchmarkEncryptedInsertRun(b *testing.B) {
	for _, mode := range []string{"plain", "encrypted"} {
		b.Run(mode, func(b *testing.B) {
			db := pgtest.New(b)
			var ran atomic.Int64
			reg := jobfence.NewRegistry()
			jobfence.AddHandler(reg, func(ctx context.Context, j *jobfence.Job[benchCard]) error {
				if j.Args.Card == "" {
					return fmt.Errorf("empty args")
				}
				ran.Add(1)
				return nil
			})
			cfg := jobfence.Config{Queues: map[string]int{"default": 20}, Handlers: reg}
			if mode == "encrypted" {
				cfg.Encryption = encKeys("k1", "k1")
				cfg.Encryption.Kinds = []string{"bench_card"}
			}
			c, err := jobfence.NewClient(db.Pool, testConfig(cfg))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			if err := c.Start(ctx); err != nil {
				b.Fatal(err)
			}
			defer c.Stop(ctx)
			args := benchCard{Customer: "cus_0123456789", Card: "tok_4111111111111111_visa_exp_2029_12", Note: "charge for the order placed on the first of the month, with the loyalty discount applied"}
			b.ResetTimer()
			for range b.N {
				if _, err := c.Insert(ctx, args, nil); err != nil {
					b.Fatal(err)
				}
			}
			deadline := time.Now().Add(time.Minute)
			for ran.Load() < int64(b.N) {
				if time.Now().After(deadline) {
					b.Fatalf("%d of %d jobs ran in a minute", ran.Load(), b.N)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
}
