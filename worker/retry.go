package worker

import (
	"math"
	"math/rand/v2"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// RetryPolicy decides when a failed job runs again.
type RetryPolicy interface {
	// NextRetry returns when job, whose attempt job.Attempt just failed,
	// becomes ready again.
	NextRetry(job *queue.Job) time.Time
}

// ExponentialRetry backs off attempt^4 seconds (1s, 16s, 81s, 256s, ...),
// capped at Max, with up to ±Jitter of random spread so jobs that failed
// together do not retry together. The zero value uses Max 24h and Jitter 0.1.
type ExponentialRetry struct {
	Max    time.Duration
	Jitter float64
}

// NextRetry implements RetryPolicy.
func (r ExponentialRetry) NextRetry(job *queue.Job) time.Time {
	maxWait := r.Max
	if maxWait <= 0 {
		maxWait = 24 * time.Hour
	}
	jitter := r.Jitter
	if jitter <= 0 {
		jitter = 0.1
	}
	secs := math.Pow(float64(max(job.Attempt, 1)), 4)
	secs *= 1 + jitter*(2*rand.Float64()-1)
	d := time.Duration(secs * float64(time.Second))
	if d > maxWait || d < 0 {
		d = maxWait
	}
	return time.Now().Add(d)
}
