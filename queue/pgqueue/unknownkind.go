package pgqueue

import (
	"strings"

	"github.com/jobfence/jobfence/queue"
)

// UnknownKindCondition is the SQL condition under which a row of
// jobfence_jobs is a job waiting for a worker that knows its kind: ready
// or waiting to be, with a latest error that is a put-back for an unknown
// kind (queue.AttemptError.UnknownKindPutBack). List's UnknownKind filter
// uses it, and so does anything else that counts such jobs (the
// dashboard's /metrics), so that both agree.
func UnknownKindCondition() string {
	prefix := "'" + strings.ReplaceAll(queue.ErrUnknownKind.Error(), "'", "''") + "'"
	return "(state IN ('available', 'scheduled') AND errors->-1->>'put_back' = 'true' AND starts_with(errors->-1->>'error', " + prefix + "))"
}
