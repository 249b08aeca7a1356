package queue

import "strings"

// UnknownKindPutBack reports whether e records a put-back of a job whose
// kind had no handler in the worker that claimed it: a put-back whose
// error is ErrUnknownKind's. Such a job waits for a worker that knows its
// kind (during a rolling deploy, the instances already updated).
func (e AttemptError) UnknownKindPutBack() bool {
	return e.PutBack && strings.HasPrefix(e.Error, ErrUnknownKind.Error())
}

// UnknownKindPutBacks is how many put-backs for an unknown kind errs (a
// job's errors, oldest first) end with.
func UnknownKindPutBacks(errs []AttemptError) int {
	n := 0
	for i := len(errs) - 1; i >= 0 && errs[i].UnknownKindPutBack(); i-- {
		n++
	}
	return n
}
