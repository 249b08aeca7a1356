package worker

import "github.com/jobfence/jobfence/queue"

// SetAfterCompleteTx sets the hook a transactional job runs between its
// fenced completion and its commit.
func SetAfterCompleteTx(w *Worker, f func(*queue.Job)) { w.afterCompleteTx = f }
