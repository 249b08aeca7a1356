package scheduler

import (
	"strconv"
	"strings"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// FireOf returns the fire that job, a job a schedule enqueued, runs for:
// the schedule's name and the fire time, read from the unique key that the
// fire enqueued it with (cron:<name>:<Unix time>, see UniqueKey, or
// TriggerKey's for a Trigger), never from its ScheduledAt, which a retry, a
// snooze or a rescue moves. Every attempt of the job sees the same Fire. ok
// is false for a job whose unique key is not a fire's. A handler calls it
// with its job:
//
//	fire, ok := scheduler.FireOf(job.Job) // job is a *worker.Job[T]
func FireOf(job *queue.Job) (fire Fire, ok bool) {
	if job == nil {
		return Fire{}, false
	}
	rest, ok := strings.CutPrefix(job.UniqueKey, "cron:")
	if !ok {
		return Fire{}, false
	}
	rest, triggered := strings.CutSuffix(rest, triggerSuffix)
	i := strings.LastIndexByte(rest, ':')
	if i <= 0 {
		return Fire{}, false
	}
	sec, err := strconv.ParseInt(rest[i+1:], 10, 64)
	if err != nil {
		return Fire{}, false
	}
	return Fire{Schedule: rest[:i], At: time.Unix(sec, 0).UTC(), JobID: job.ID, Triggered: triggered}, true
}
