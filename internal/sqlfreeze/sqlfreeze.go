// Package sqlfreeze freezes a database client at a statement of its
// choosing, for tests of what a frozen process (SIGSTOP, a paused VM)
// leaves locked behind it, without a child process or a hook in the code
// under test. The client's pool connects through a netfault proxy, and a
// pgx tracer stops the proxy when the chosen statement goes by: once its
// reply is in (the client froze between that statement and its next), or
// as soon as it is sent (the server runs it, the client reads nothing
// back). Every connection of the pool freezes at once, as a process's do.
package sqlfreeze

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/internal/netfault"
)

// Point says where a Freezer freezes its client.
type Point struct {
	// Match picks the statement by its SQL text.
	Match func(sql string) bool
	// Sent freezes the client as soon as the statement is sent: the server
	// runs it, but its reply is held. Otherwise the client freezes once it
	// has read the reply, before it sends anything else.
	Sent bool
	// Before, when set, runs just before the statement is sent.
	Before func()
	// Batch matches the statements queued in a batch (SendBatch) instead
	// of those sent alone: the client freezes at the batch that holds the
	// first match, once its last reply is in, or, with Sent, as soon as
	// the whole batch is sent (the server runs it, in one implicit
	// transaction that it commits at the batch's end).
	Batch bool
}

// Freezer is a pool whose client a test can freeze; see the package doc.
type Freezer struct {
	// Pool connects through the freezer's proxy.
	Pool *pgxpool.Pool

	proxy  *netfault.Proxy
	mu     sync.Mutex
	armed  *Point
	frozen chan uint32
}

// New opens a pool on dbURL whose connections go through a proxy that
// forwards until a Point armed with Arm is reached. It is thawed, then
// closed, when the test ends.
func New(t testing.TB, dbURL string, maxConns int32) *Freezer {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		t.Fatalf("sqlfreeze: %v", err)
	}
	f := &Freezer{frozen: make(chan uint32, 1)}
	f.proxy = netfault.New(t, netfault.TargetOf(t, dbURL), netfault.Forward)
	host, port, err := net.SplitHostPort(f.proxy.Addr())
	if err != nil {
		t.Fatal(err)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.Host, cfg.ConnConfig.Port, cfg.ConnConfig.Fallbacks = host, uint16(p), nil
	cfg.ConnConfig.Tracer = f
	if maxConns > 0 {
		cfg.MaxConns = maxConns
	}
	if f.Pool, err = pgxpool.NewWithConfig(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Pool.Close)
	// Cleanups run last first: the client thaws before its pool closes,
	// which waits for its connections.
	t.Cleanup(f.Thaw)
	return f
}

// Arm makes the next statement that p matches freeze the client.
func (f *Freezer) Arm(p Point) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed = &p
}

// Frozen waits up to timeout for the client to freeze and returns the
// process ID of the server backend whose statement froze it.
func (f *Freezer) Frozen(t testing.TB, timeout time.Duration) uint32 {
	t.Helper()
	select {
	case pid := <-f.frozen:
		return pid
	case <-time.After(timeout):
		t.Fatalf("sqlfreeze: the client did not reach its freeze point within %v", timeout)
	}
	return 0
}

// Thaw lets the client run on: the bytes held meanwhile go through.
func (f *Freezer) Thaw() { f.proxy.SetMode(netfault.Forward) }

// pointKey marks the context of a statement that freezes once its reply
// is in.
type pointKey struct{}

// TraceQueryStart implements pgx.QueryTracer.
func (f *Freezer) TraceQueryStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	f.mu.Lock()
	p := f.armed
	if p == nil || p.Batch || !p.Match(data.SQL) {
		f.mu.Unlock()
		return ctx
	}
	f.armed = nil
	f.mu.Unlock()
	// Described beforehand, the statement goes out in one write, which
	// the server runs without waiting for anything more from the client
	// (the first use of a statement otherwise waits for its description).
	// A statement without arguments goes out in one write anyway; it may
	// hold several commands, which a prepared statement cannot.
	var prepare []string
	if len(data.Args) > 0 {
		prepare = []string{data.SQL}
	}
	return f.reach(ctx, conn, p, prepare)
}

// reach is what a statement or batch does at the Point p it matched:
// with p.Sent it prepares the statements named, so that what follows
// goes out in one write, and freezes the client's replies; otherwise it
// marks ctx for its end (TraceQueryEnd, TraceBatchEnd) to freeze.
func (f *Freezer) reach(ctx context.Context, conn *pgx.Conn, p *Point, prepare []string) context.Context {
	if p.Before != nil {
		p.Before()
	}
	if !p.Sent {
		return context.WithValue(ctx, pointKey{}, p)
	}
	for _, sql := range prepare {
		_, _ = conn.Prepare(ctx, sql, sql)
	}
	f.proxy.SetMode(netfault.StallReplies)
	f.frozen <- conn.PgConn().PID()
	return ctx
}

// TraceQueryEnd implements pgx.QueryTracer.
func (f *Freezer) TraceQueryEnd(ctx context.Context, conn *pgx.Conn, data pgx.TraceQueryEndData) {
	if _, ok := ctx.Value(pointKey{}).(*Point); !ok {
		return
	}
	f.proxy.SetMode(netfault.Stall)
	f.frozen <- conn.PgConn().PID()
}

// TraceBatchStart implements pgx.BatchTracer (see Point.Batch).
func (f *Freezer) TraceBatchStart(ctx context.Context, conn *pgx.Conn, data pgx.TraceBatchStartData) context.Context {
	f.mu.Lock()
	p := f.armed
	match := false
	if p != nil && p.Batch {
		for _, q := range data.Batch.QueuedQueries {
			match = match || p.Match(q.SQL)
		}
	}
	if !match {
		f.mu.Unlock()
		return ctx
	}
	f.armed = nil
	f.mu.Unlock()
	// Described beforehand, the batch goes out in one write, which the
	// server runs to its end without waiting for the client.
	prepare := make([]string, len(data.Batch.QueuedQueries))
	for i, q := range data.Batch.QueuedQueries {
		prepare[i] = q.SQL
	}
	return f.reach(ctx, conn, p, prepare)
}

// TraceBatchQuery implements pgx.BatchTracer.
func (f *Freezer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

// TraceBatchEnd implements pgx.BatchTracer.
func (f *Freezer) TraceBatchEnd(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchEndData) {
	f.TraceQueryEnd(ctx, conn, pgx.TraceQueryEndData{})
}

// Backend is what pg_stat_activity says of a server backend.
type Backend struct {
	// State is "idle" outside a transaction, "idle in transaction",
	// "active", or "gone" once the backend has ended.
	State string
	// Locks counts the locks it holds.
	Locks int
}

// ReadBackend reads what pool's server says of backend pid.
func ReadBackend(ctx context.Context, pool *pgxpool.Pool, pid uint32) (Backend, error) {
	var b Backend
	err := pool.QueryRow(ctx, `
SELECT coalesce((SELECT state FROM pg_stat_activity WHERE pid = $1), 'gone'),
       (SELECT count(*) FROM pg_locks WHERE pid = $1 AND granted AND locktype <> 'virtualxid')`,
		int32(pid)).Scan(&b.State, &b.Locks)
	return b, err
}

// WaitIdle fails t unless backend pid, of a frozen client, holds no
// transaction open within timeout: the work its statement did is
// committed, and nothing of it stays locked while the client is frozen.
// A statement frozen as it was sent may not have reached the server yet,
// and the backend is idle then too: call WaitIdle once the statement's
// work is seen done.
func WaitIdle(t testing.TB, pool *pgxpool.Pool, pid uint32, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		b, err := ReadBackend(context.Background(), pool, pid)
		if err != nil {
			t.Fatal(err)
		}
		if (b.State == "idle" || b.State == "gone") && b.Locks == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the frozen client's backend is %q with %d locks, %v on, want idle with none",
				b.State, b.Locks, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
