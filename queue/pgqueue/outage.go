package pgqueue

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/jobfence/jobfence/queue"
)

// The SQLSTATEs of a transaction that outran a bound BeginTx set.
const (
	sqlstateIdleInTxTimeout  = "25P03" // idle_in_transaction_session_timeout
	sqlstateLockNotAvailable = "55P03" // lock_timeout
)

// outageTries is how many new sessions Outage opens before it takes the
// server for unreachable.
const outageTries = 2

// Outage implements worker.OutageChecker for a transactional handler's
// transaction (see BeginTx) whose connection closed with err. The failure
// is the handler's own when PostgreSQL ended the session for outrunning
// the lease (SQLSTATE 25P03 idle_in_transaction_session_timeout, 55P03
// lock_not_available), or when the server answers a new session and has
// not started since job was claimed (pg_postmaster_start_time against the
// claim's attempted_at, both by the server's clock, as Rescue judges it):
// the backend was terminated (pg_terminate_backend) or died on its own
// while the server stayed up. Otherwise (the server restarted, is
// shutting down, or cannot be reached within ctx) it is an outage.
//
// The question goes to a new session, not to one of the pool's: while a
// server shuts down, a pooled session whose backend has not yet taken its
// signal (a busy machine delays it) still answers, with the old start
// time, and the outage would be taken for the handler's own doing. A new
// session is refused from the shutdown's start ("the database system is
// shutting down").
func (c *Client) Outage(ctx context.Context, job *queue.Job, err error) bool {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == sqlstateIdleInTxTimeout || pgErr.Code == sqlstateLockNotAvailable) {
		return false
	}
	var started time.Time
	qerr := errors.New("not asked")
	for i := 0; i < outageTries && qerr != nil && ctx.Err() == nil; i++ {
		started, qerr = c.serverStarted(ctx)
	}
	if qerr != nil {
		return true
	}
	return started.After(job.AttemptedAt)
}

// serverStarted asks the server, in a session of its own outside the pool,
// when it started.
func (c *Client) serverStarted(ctx context.Context) (time.Time, error) {
	conn, err := pgx.ConnectConfig(ctx, c.pool.Config().ConnConfig.Copy())
	if err != nil {
		return time.Time{}, err
	}
	defer conn.Close(ctx)
	var started time.Time
	err = conn.QueryRow(ctx, "SELECT pg_postmaster_start_time()").Scan(&started)
	return started, err
}
