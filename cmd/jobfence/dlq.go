package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/jobfence/jobfence/queue/kafkaqueue"
)

func runDLQ(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("dlq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", os.Getenv("KAFKA_BROKERS"), "Kafka bootstrap brokers, comma-separated (default $KAFKA_BROKERS)")
	q := fs.String("queue", "", "the queue (main topic) whose dead letters to move back; required")
	group := fs.String("group", "", "consumer group that records what was moved (default jobfence-redrive.<queue>)")
	maxN := fs.Int("max", 0, "move at most this many dead letters (0: all there now)")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: jobfence dlq redrive --queue Q [--brokers host:port,...] [--group G] [--max N] [--timeout D]")
		fs.PrintDefaults()
	}
	action, rest, err := parseAction(fs, args, "redrive")
	if err != nil {
		return err
	}
	switch {
	case len(rest) != 0:
		fs.Usage()
		return fmt.Errorf("unexpected arguments after %s: %q", action, rest)
	case action != "redrive":
		return fmt.Errorf("unknown dlq action %q: want redrive", action)
	case *brokers == "":
		return errors.New("no brokers: pass --brokers or set KAFKA_BROKERS")
	case *q == "":
		fs.Usage()
		return errors.New("no queue: pass --queue")
	}
	cl, err := kafkaqueue.NewClient(kafkaqueue.Config{
		Brokers: strings.Split(*brokers, ","),
		Logger:  slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	n, err := cl.Redrive(ctx, *q, kafkaqueue.RedriveOptions{GroupID: *group, Max: *maxN})
	fmt.Fprintf(stdout, "moved %d dead letter(s) of %s back to %s\n", n, *q, kafkaqueue.Config{}.RetryTopic(*q))
	return err
}
