package worker

import (
	"time"

	"github.com/jobfence/jobfence/queue"
)

// SetAfterCompleteTx sets the hook a transactional job runs between its
// fenced completion and its commit.
func SetAfterCompleteTx(w *Worker, f func(*queue.Job)) { w.afterCompleteTx = f }

// SetHelperMaxPerJob sets the claim time per job under which the worker's
// helper fetch loops claim beside the lead, before Start.
func SetHelperMaxPerJob(w *Worker, d time.Duration) { w.helperMaxPerJob = d }
