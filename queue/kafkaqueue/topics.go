package kafkaqueue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/segmentio/kafka-go"
)

// ErrMissingTopic reports that a topic the Backend needs does not exist.
// Each queue T needs T, its retry topic and its dead-letter topic.
var ErrMissingTopic = errors.New("kafkaqueue: topic does not exist")

// neededTopics lists every topic the Backend reads or writes.
func (c Config) neededTopics() []string {
	var ts []string
	for _, t := range c.Topics {
		ts = append(ts, t, t+c.RetryTopicSuffix, t+c.DeadLetterTopicSuffix)
	}
	return ts
}

// checkTopics asks the brokers for the topics' metadata and reports the
// missing ones, so a missing retry or dead-letter topic is an error at start
// rather than a group that never forms or a dead letter that cannot be
// written.
func checkTopics(ctx context.Context, c Config) error {
	topics := c.neededTopics()
	cl := c.adminClient()
	md, err := cl.Metadata(ctx, &kafka.MetadataRequest{Topics: topics})
	if err != nil {
		return fmt.Errorf("kafkaqueue: read metadata of topics %q: %w", topics, err)
	}
	found := make(map[string]bool, len(md.Topics))
	for _, t := range md.Topics {
		if t.Error == nil && len(t.Partitions) > 0 {
			found[t.Name] = true
		}
	}
	var missing []string
	for _, t := range topics {
		if !found[t] {
			missing = append(missing, fmt.Sprintf("%q", t))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s (every queue T needs T, T%s and T%s)", ErrMissingTopic,
			strings.Join(missing, ", "), c.RetryTopicSuffix, c.DeadLetterTopicSuffix)
	}
	return nil
}
