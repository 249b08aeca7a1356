// Command kafka-rebalance shows a Kafka consumer group rebalancing mid-stream
// with every job's effect applied once.
//
// Three service instances run the same worker handler on the partitions of
// one topic through kafkaqueue. While 3,000 jobs stream in, one instance
// stops and a fourth joins; their partitions move each time. Every handler
// writes its effect to Postgres keyed by the job's idempotency key and
// fenced by its consumer-group generation, so a job that runs again after a
// rebalance (its offset was not yet committed) changes nothing twice, and a
// late write from an older generation is rejected. The program prints the
// partitions as they move and the counts at the end, and exits non-zero if
// any job's effect is missing or doubled.
//
//	go run ./examples/kafka-rebalance
//
// It starts a throwaway Postgres and an in-process Kafka-protocol broker
// unless DATABASE_URL and KAFKA_BROKERS name real ones.
package main

import (
	"github.com/jobfence/jobfence/examples/kafka-rebalance/rebalance"
	"github.com/jobfence/jobfence/examples/scenario"
)

// The scenario's code is in package rebalance, beside this file; `jobfence
// demo` runs the same code. Copied into your module, point the import
// above at your copy.
func main() {
	scenario.Main("kafka-rebalance", scenario.Servers{Postgres: true, Kafka: true}, rebalance.Run)
}
