package pgqueue

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
)

// Channels on which pgqueue notifies workers. Payloads are a queue name for
// insertChannel and "<job ID>:<fence>" for cancelChannel.
const (
	insertChannel = "jobfence_insert"
	cancelChannel = "jobfence_cancel"
)

// Config tunes a Client. The zero value is ready to use.
type Config struct {
	// Logger receives the client's logs; nil means slog.Default().
	Logger *slog.Logger
	// TxReserve is how many of the pool's connections transactional
	// handlers (worker.AddTx) leave to the worker's heartbeats, claims and
	// outcomes: each such handler holds a connection for as long as it
	// runs, and a worker whose heartbeats wait behind them loses every
	// lease. BeginTx waits for a connection once the pool's MaxConns less
	// TxReserve transactions are open. Zero means DefaultTxReserve.
	TxReserve int
	// InsertHook, when set, observes every enqueue (Enqueue, EnqueueTx,
	// Insert, InsertTx, EnqueueMany, EnqueueManyTx) and may add metadata
	// to its jobs; see queue.InsertHook. telemetry.PGQueue sets it.
	InsertHook queue.InsertHook
	// ListenURL, when set, is where the LISTEN connection for wake-ups,
	// cancel notifications and queue pauses goes instead of the pool: a
	// connection straight to PostgreSQL when the pool goes through
	// PgBouncer in transaction mode, where LISTEN does not work. It must
	// reach the same database. A Client opens at most one such connection,
	// shared by all its workers and queues, and only while something
	// listens. Without ListenURL that connection is taken out of the pool
	// for good (the pool may open another in its place), so the server
	// sees at most one connection more than the pool's MaxConns.
	ListenURL string
	// PollOnly turns LISTEN off: workers find jobs by polling
	// (worker.Config.PollInterval), learn of cancelled jobs at their next
	// heartbeat (worker.Config.HeartbeatInterval) and of paused queues
	// within PausePollInterval. Use it behind
	// PgBouncer in transaction mode when no direct connection is at hand.
	// It takes precedence over ListenURL.
	PollOnly bool
	// PausePollInterval is how often a worker reads which of its queues
	// are paused (PauseQueue) when no notification can tell it: with
	// PollOnly, or while its LISTEN connection is down. With LISTEN up a
	// pause reaches it at once, and it reads the set every 30
	// PausePollIntervals only in case the connection died silently. Zero
	// means DefaultPausePollInterval (1s).
	PausePollInterval time.Duration
	// CountCap bounds the counts of Queues (and the dashboard's overview
	// and queues pages): each queue's jobs in a state are counted exactly
	// up to CountCap and shown as a lower bound beyond, so that reading
	// them costs the same at a million jobs as at a thousand. Zero means
	// DefaultCountCap (10,000).
	CountCap int
	// NoSeries turns off the per-minute series of enqueues, attempts and
	// waits that the dashboard charts (docs/dashboard.md "Charts"): the
	// client counts nothing, and FlushSeries writes nothing. By default
	// (false) every enqueue and attempt adds to in-memory counters, which
	// FlushSeries (a worker's, once a minute) writes with one statement.
	NoSeries bool
	// LimitSettle bounds how long SetLimit waits for the transactions that
	// were open when it stored a limit: an insert in one of them read the
	// limits before the new one existed, and its job would run unlimited.
	// SetLimit brings such jobs under the limit once they have committed,
	// or once LimitSettle has passed (it then logs how many transactions
	// were still open: the jobs they insert later are not governed). Zero
	// means DefaultLimitSettle (5s).
	LimitSettle time.Duration
	// PriorityAging, when positive, improves the priority of a job that
	// waits available by one level (Priority - 1, to queue.MinPriority)
	// for every PriorityAging it has waited at its priority, so that a
	// steady stream of jobs of a better priority does not hold a job back
	// for ever: a job of priority 4 that has waited 3 PriorityAging runs
	// as one of priority 1. The workers' promoter pass (Promote) applies
	// it, in bounded batches (the oldest 32 of each priority of 32 queues
	// a pass, every PromoteInterval, going round the queues), rather than
	// the claim, whose order and index stay as they are
	// (docs/handlers.md#priority-aging). Zero (the default) turns it off.
	PriorityAging time.Duration
	// StalledSession bounds how long a session may wait for its client in
	// the middle of a statement or a batch, inside a transaction holding a
	// lock on jobfence's tables, before a worker's maintenance ends it
	// (EndStalledSessions): a client frozen or cut off after sending only
	// part of a batch leaves its transaction open with no idle bound of
	// PostgreSQL's to end it. Zero means DefaultStalledSession (30s); a
	// negative value turns the check off, as a server older than
	// PostgreSQL 14 does.
	StalledSession time.Duration
	// ReleaseChunk is how many dependents of a completed workflow task
	// its completion releases in its own transaction; the rest are
	// released after its commit, in ranges of as many (see
	// ReleaseDependents). Zero means DefaultReleaseChunk (1,000).
	ReleaseChunk int
	// AwaitPollMin and AwaitPollMax bound the poll of AwaitJob and
	// AwaitWorkflow, which read the job (or the workflow's tasks) again
	// AwaitPollMin after a read that found it unfinished, doubling the
	// interval up to AwaitPollMax, and at once when a notification says it
	// ended. Behind PgBouncer in transaction mode without a ListenURL, or
	// with PollOnly, the poll is all there is. Zero means
	// DefaultAwaitPollMin and DefaultAwaitPollMax; an
	// AwaitPollMax below AwaitPollMin is AwaitPollMin.
	AwaitPollMin, AwaitPollMax time.Duration
	// Encryption, when set, seals the args of the jobs it encrypts
	// (queue.KeyRing.Encrypts: those whose args type asks, or all with
	// Encryption.All) before they are stored, and keys their unique hash
	// (see queue.EnqueueParams.UniqueHashFor). Nil: args are stored as
	// given, and an insert that asks for encryption is refused with
	// queue.ErrEncryptionKey. See docs/encryption.md.
	Encryption *queue.KeyRing
}

// DefaultTxReserve is the default of Config.TxReserve: one connection for
// heartbeats and one for claims and outcomes.
const DefaultTxReserve = 2

// The interfaces a worker finds by assertion: a Client must keep them all.
var (
	_ queue.Backend       = (*Client)(nil)
	_ queue.Waker         = (*Client)(nil)
	_ queue.Maintainer    = (*Client)(nil)
	_ queue.Promoter      = (*Client)(nil)
	_ queue.Canceller     = (*Client)(nil)
	_ queue.Checker       = (*Client)(nil)
	_ queue.PauseWatcher  = (*Client)(nil)
	_ queue.Registrar     = (*Client)(nil)
	_ queue.FinishClaimer = (*Client)(nil)
	_ queue.SessionReaper = (*Client)(nil)

	_ queue.DependentReleaser = (*Client)(nil)
)

// Client enqueues, claims and finishes jobs in PostgreSQL. It implements
// queue.Backend, queue.Waker, queue.Maintainer, queue.Promoter,
// queue.Canceller, queue.Checker, queue.PauseWatcher and queue.Registrar,
// so a worker.Worker can run on it. A Client is safe for concurrent use.
type Client struct {
	pool *pgxpool.Pool
	// cfg is the Config New was given, with its defaults filled in.
	cfg Config
	// txSlots holds a token for each open BeginTx transaction; nil (a pool
	// too small to reserve anything) refuses BeginTx.
	txSlots chan struct{}
	// listener holds the client's one LISTEN connection.
	listener *listener
	// paces remember, per queue, how long this client's claims take.
	paces paces
	// ageCursor is the queue after which the next aging pass goes on.
	ageCursor struct {
		sync.Mutex
		queue string
	}
	// grantCursor is the partition after which GrantWaiting goes on.
	grantCursor struct {
		sync.Mutex
		p partition
	}
	// refills remembers when rate slots free for waiting jobs.
	refills refills
	// routes remembers which limits' grants need grantSQL.
	routes grantRoutes
	// stalled remembers the sessions EndStalledSessions found waiting.
	stalled stalledSessions
	// wakes coalesces the wake-ups of Enqueue and Insert.
	wakes *wakes
	// releases runs the releases of dependents after completions.
	releases *releases
	// series counts enqueues and attempts per minute until FlushSeries
	// writes them; nil with Config.NoSeries.
	series *series

	// redactor removes the passwords of the pool's and the listener's
	// connection strings, and any in a URL or a password=... pair, from
	// the log records handlers store (RecordLogs).
	redactor *Redactor
	// awaitHook, set by tests only, is called each time an await has
	// found its job or workflow unfinished and is about to wait.
	awaitHook func()
}

// New returns a Client on pool. The pool's search_path decides the schema
// of jobfence's tables.
func New(pool *pgxpool.Pool, cfg Config) *Client {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.TxReserve <= 0 {
		cfg.TxReserve = DefaultTxReserve
	}
	if cfg.PausePollInterval <= 0 {
		cfg.PausePollInterval = DefaultPausePollInterval
	}
	if cfg.LimitSettle <= 0 {
		cfg.LimitSettle = DefaultLimitSettle
	}
	if cfg.StalledSession == 0 {
		cfg.StalledSession = DefaultStalledSession
	}
	if cfg.ReleaseChunk <= 0 {
		cfg.ReleaseChunk = DefaultReleaseChunk
	}
	if cfg.AwaitPollMin <= 0 {
		cfg.AwaitPollMin = DefaultAwaitPollMin
	}
	if cfg.AwaitPollMax <= 0 {
		cfg.AwaitPollMax = DefaultAwaitPollMax
	}
	cfg.AwaitPollMax = max(cfg.AwaitPollMax, cfg.AwaitPollMin)
	c := &Client{pool: pool, cfg: cfg, releases: newReleases()}
	if pool != nil {
		c.redactor = NewRedactor(pool.Config().ConnString(), cfg.ListenURL)
	}
	if !cfg.NoSeries {
		c.series = &series{now: time.Now}
	}
	c.refills.wake = make(chan struct{}, 1)
	c.listener = newListener(cfg.Logger, c.listenConn)
	c.wakes = newWakes(cfg.Logger, func(ctx context.Context, q string) error {
		_, err := c.pool.Exec(ctx, wakeSQL, insertChannel, []string{q})
		return err
	})
	if pool != nil {
		if n := int(pool.Config().MaxConns) - cfg.TxReserve; n > 0 {
			c.txSlots = make(chan struct{}, n)
		}
	}
	return c
}

// Close stops the wake-ups that the client sends in the background after
// Enqueue and Insert (a job committed while its queue's previous wake-up
// was in flight rides on the next one, sent when that one is done), and
// the releases of a workflow task's dependents that it runs after the
// task's completion (see ReleaseDependents), and returns once they have
// stopped: call it before closing the pool. A wake-up it stops is logged,
// and its jobs are found by the workers' next poll; a release it stops is
// logged, and a worker's maintenance finishes it. Close does not stop
// workers or listeners (their contexts do); the client stays usable, and
// from then on each Enqueue sends its own wake-up and each completion
// releases all its dependents before it returns.
func (c *Client) Close() {
	c.wakes.close()
	c.releases.close()
}

// TxSlots reports how many transactional handlers may hold a connection
// at once: the pool's MaxConns less Config.TxReserve. A worker warns when
// its concurrency is larger, and refuses transactional handlers when it is
// zero.
func (c *Client) TxSlots() int { return cap(c.txSlots) }

// Pool returns the client's pool.
func (c *Client) Pool() *pgxpool.Pool { return c.pool }

// DB is what enqueueing needs of a connection: a *pgxpool.Pool, a
// *pgx.Conn and a pgx.Tx all have it.
type DB interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
}
