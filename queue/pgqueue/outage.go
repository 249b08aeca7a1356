package pgqueue

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobfence/jobfence/queue"
)

// The SQLSTATEs of a transaction that outran a bound BeginTx set.
const (
	sqlstateIdleInTxTimeout  = "25P03" // idle_in_transaction_session_timeout
	sqlstateLockNotAvailable = "55P03" // lock_timeout
)

// outageTries is how many connections Outage asks before it takes the
// server for unreachable: the pool may first hand out one that the same
// outage broke.
const outageTries = 2

// Outage implements worker.OutageChecker for a transactional handler's
// transaction (see BeginTx) whose connection closed with err. The failure
// is the handler's own when PostgreSQL ended the session for outrunning
// the lease (SQLSTATE 25P03 idle_in_transaction_session_timeout, 55P03
// lock_not_available), or when the server answers through the pool and
// has not started since job was claimed (pg_postmaster_start_time against
// the claim's attempted_at, both by the server's clock, as Rescue judges
// it): the backend was terminated (pg_terminate_backend) or died on its
// own while the server stayed up. Otherwise (the server restarted, or
// cannot be reached within ctx) it is an outage.
func (c *Client) Outage(ctx context.Context, job *queue.Job, err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == sqlstateIdleInTxTimeout || pgErr.Code == sqlstateLockNotAvailable) {
		return false
	}
	var started time.Time
	qerr := errors.New("not asked")
	for i := 0; i < outageTries && qerr != nil && ctx.Err() == nil; i++ {
		qerr = c.pool.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&started)
	}
	if qerr != nil {
		return true
	}
	return started.After(job.AttemptedAt)
}
