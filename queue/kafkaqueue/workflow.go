package kafkaqueue

import (
	"context"
	"fmt"

	"github.com/jobfence/jobfence/queue"
)

// InsertWorkflow implements queue.WorkflowInserter by refusing: a
// workflow releases a task's dependents in the transaction of its fenced
// completion, which a topic cannot do. It returns an error wrapping
// queue.ErrWorkflowsUnsupported, naming the workflow.
func (c *Client) InsertWorkflow(ctx context.Context, p queue.WorkflowParams) (queue.WorkflowResult, error) {
	name := p.Name
	if name == "" {
		name = p.ID
	}
	return queue.WorkflowResult{}, fmt.Errorf("kafkaqueue: workflow %q (%d tasks): %w; the Kafka backend runs independent jobs only: insert workflows through pgqueue.Client",
		name, len(p.Tasks), queue.ErrWorkflowsUnsupported)
}
