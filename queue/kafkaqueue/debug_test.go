package kafkaqueue

import (
	"fmt"
	"strings"
	"time"
)

// debugState describes the backend's generation and partition buffers, for
// the progress reports tests print when KAFKAQUEUE_TEST_LOG is set.
func (b *Backend) debugState() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var sb strings.Builder
	if b.gen == nil {
		return "no gen"
	}
	fmt.Fprintf(&sb, "gen %d running %d timers %d\n", b.gen.id, len(b.running), len(b.timers))
	for _, p := range b.gen.parts {
		fmt.Fprintf(&sb, "  %s/%d next %d committed %d running %d entries %d keys %d:", p.topic, p.id, p.next, p.committed, p.running, len(p.entries), len(p.keys))
		for i, e := range p.entries {
			if i > 5 {
				break
			}
			fmt.Fprintf(&sb, " [off %d st %d key %s nb %v att %d elig %v]", e.msg.Offset, e.state, e.msg.Key, time.Until(e.notBefore).Round(time.Millisecond), e.attempt, p.eligible(e))
		}
		sb.WriteString("\n")
	}
	return sb.String()
}
