package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/jobfence/jobfence/internal/devenv/kafkaenv"
	"github.com/jobfence/jobfence/queue/kafkaqueue"
)

func TestDLQRedrive(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const topic = "payouts"
	c, err := kafkaenv.Start(1, time.Second, topic, topic+".retry", topic+".dlq")
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := strings.Join(c.ListenAddrs(), ",")
	w := &kafka.Writer{Addr: kafka.TCP(c.ListenAddrs()...)}
	defer w.Close()
	if err := w.WriteMessages(ctx, kafka.Message{Topic: topic + ".dlq", Value: []byte(`{}`), Headers: []kafka.Header{
		{Key: kafkaqueue.HeaderKind, Value: []byte("payout")},
		{Key: kafkaqueue.HeaderAttempt, Value: []byte("3")},
		{Key: kafkaqueue.HeaderMaxAttempts, Value: []byte("3")},
		{Key: kafkaqueue.HeaderOrigin, Value: []byte(topic + "/0/41")},
	}}); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) (string, string, int) {
		var out, errb bytes.Buffer
		code := run(ctx, append([]string{"dlq"}, args...), &out, &errb)
		return out.String(), errb.String(), code
	}
	for _, tt := range []struct {
		args    []string
		wantErr string
	}{
		{[]string{"redrive", "--brokers", brokers}, "no queue: pass --queue"},
		{[]string{"requeue", "--brokers", brokers, "--queue", topic}, `unknown dlq action "requeue"`},
		{[]string{"redrive", "--queue", topic, "--brokers", ""}, "no brokers"},
	} {
		if _, errs, code := cli(tt.args...); code != 1 || !strings.Contains(errs, tt.wantErr) {
			t.Errorf("dlq %q: code %d, stderr %q; want 1 and %q", tt.args, code, errs, tt.wantErr)
		}
	}
	out, errs, code := cli("redrive", "--brokers", brokers, "--queue", topic)
	if code != 0 || out != "moved 1 dead letter(s) of payouts back to payouts.retry\n" {
		t.Fatalf("dlq redrive: code %d, stdout %q, stderr %q", code, out, errs)
	}
	r := kafka.NewReader(kafka.ReaderConfig{Brokers: c.ListenAddrs(), Topic: topic + ".retry", MaxWait: 100 * time.Millisecond})
	defer r.Close()
	m, err := r.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if o, _ := kafkaqueue.Header(m, kafkaqueue.HeaderOrigin); o != topic+"/0/41" {
		t.Errorf("the moved job's origin is %q, want %s/0/41: its idempotency key must not change", o, topic)
	}
	if n, _ := kafkaqueue.Header(m, kafkaqueue.HeaderMaxAttempts); n != "4" {
		t.Errorf("the moved job may make %s attempts, want 4: one more than it made", n)
	}
	if out, errs, code := cli("redrive", "--brokers", brokers, "--queue", topic); code != 0 || !strings.HasPrefix(out, "moved 0 ") {
		t.Fatalf("second dlq redrive: code %d, stdout %q, stderr %q; want nothing left to move", code, out, errs)
	}
}
