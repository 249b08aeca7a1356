package worker

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// ErrNegativeRetryAfter is wrapped by the error JobRateLimited returns for
// a negative retryAfter: the job's attempt then fails as any error's
// does (it is spent, and retried by the retry policy), with this reason
// recorded on it, since a wait that cannot be meant is a handler's bug.
var ErrNegativeRetryAfter = errors.New("jobfence: JobRateLimited: retry-after is negative")

// rateLimitedError asks for the job to run again after d without
// spending its attempt, and for its limit partition to back off for d.
type rateLimitedError struct {
	d   time.Duration
	err error
}

func (e *rateLimitedError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("jobfence: rate limited by the provider; retry after %s", e.d)
	}
	return fmt.Sprintf("jobfence: rate limited by the provider; retry after %s: %v", e.d, e.err)
}

func (e *rateLimitedError) Unwrap() error { return e.err }

// JobRateLimited returns an error that, returned by a handler, reports
// that the job's provider refused the call for being over its rate (an
// HTTP 429 and its Retry-After, see RetryAfter). The job runs again after
// retryAfter without spending its attempt, as with JobSnooze, and the
// limit partition the job belongs to grants no job until retryAfter has
// passed, by the database's clock: its waiting jobs stay waiting (other
// partitions are unaffected), so that the fleet stops calling the
// provider rather than spend every waiting job's attempts on 429s. A
// later report extends the partition's backoff, an earlier end never
// shortens it. A job that no limit governs just snoozes. err, if not
// nil, is recorded on the job (as a put-back's error: the attempt is not
// counted as failed). A negative retryAfter is a handler's bug: the
// error returned is then a plain one wrapping ErrNegativeRetryAfter and
// err, which fails the attempt.
func JobRateLimited(retryAfter time.Duration, err error) error {
	if retryAfter < 0 {
		if err == nil {
			return fmt.Errorf("%w: %s", ErrNegativeRetryAfter, retryAfter)
		}
		return fmt.Errorf("%w: %s (the provider's error: %w)", ErrNegativeRetryAfter, retryAfter, err)
	}
	return &rateLimitedError{d: retryAfter, err: err}
}

// RetryAfter reads an HTTP response's Retry-After header (RFC 9110
// 10.2.3): a number of seconds, or an HTTP-date, which is taken from now
// (the response's own Date header is not consulted: now is the caller's
// clock). It returns 0 when the header is absent, malformed, or names a
// time already past: the caller chooses its own wait then.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		// A bound of a year keeps the conversion from overflowing on
		// a hostile value.
		if s <= 0 {
			return 0
		}
		return time.Duration(min(s, int64(365*24*time.Hour/time.Second))) * time.Second
	}
	t, err := http.ParseTime(v)
	if err != nil {
		return 0
	}
	return max(t.Sub(now), 0)
}
