// Package txbound holds the SQL that bounds jobfence's transactions, so
// that no client frozen mid-transaction (SIGSTOP, a paused VM) keeps rows
// locked for as long as it stays frozen: PostgreSQL ends such a
// transaction (and its session) once it has sat idle past its bound, and
// its locks go with it.
//
// A lease holder's transaction is bounded by the lease its row has left,
// by the database's clock (LeftMs, Set): the job or key is taken over
// then. The worker's transactional handlers (pgqueue.CompleteTx) and
// idempotency.DoTx use it. A transaction that holds no lease and runs its
// statements back to back, with none of the caller's code between them,
// is bounded by Idle (Begin).
package txbound

import (
	"strconv"
	"strings"
	"time"
)

// LeftMs is what the lease of the row in scope (its lease_expires_at
// column) has left, in whole milliseconds, and at least a second, so a
// holder whose work outran the lease still has a moment to commit: nobody
// could take the row over while its transaction held it.
const LeftMs = `greatest(ceil(extract(epoch FROM lease_expires_at - clock_timestamp()) * 1000), 1000)`

// Set is a select list that sets, for the rest of the transaction
// (set_config's is_local, as SET LOCAL does), the idle and the lock-wait
// bounds to LeftMs, keeping a lower bound the transaction already has (0
// means none). current_setting gives the value with its unit (500ms, 30s,
// 1min), which reads as an interval. It yields two text columns, which
// callers ignore.
const Set = `
    set_config('idle_in_transaction_session_timeout', least(nullif(extract(epoch FROM
        current_setting('idle_in_transaction_session_timeout')::interval) * 1000, 0), ` + LeftMs + `)::bigint::text, true),
    set_config('lock_timeout', least(nullif(extract(epoch FROM
        current_setting('lock_timeout')::interval) * 1000, 0), ` + LeftMs + `)::bigint::text, true)`

// Idle bounds the idle time of a transaction that runs jobfence's own
// statements back to back (a batch of inserts, a cron fire, an EXPLAIN):
// between a reply and the next statement a client takes a round trip,
// far less than Idle, so only a frozen or cut-off client reaches it, and
// what it locked is free again Idle later.
const Idle = 2 * time.Second

// LockWait bounds each lock wait of such a transaction, for a client that
// froze while its statement waited: the wait ends, the transaction sits
// idle, and Idle ends it. A lock wait is no sign of a frozen client (a
// healthy one waits while another transaction holds the unique key it
// inserts), so LockWait is long, a worker's default lease, rather than
// short: it must not fail the waits of healthy clients.
const LockWait = 30 * time.Second

// Begin is a BEGIN (for pgx.TxOptions.BeginQuery) whose transaction may
// sit idle at most idle and wait at most lock for each lock; see Bounds.
// It is one round trip, as a plain BEGIN.
func Begin(idle, lock time.Duration) string { return "BEGIN; " + Bounds(idle, lock) }

// Bounds is a statement that bounds the rest of the transaction: it may
// sit idle at most idle, and wait at most lock for each lock, keeping a
// lower bound the session already has, as Set does.
func Bounds(idle, lock time.Duration) string {
	// Set names the idle bound first, then the lock bound.
	set := strings.Replace(Set, LeftMs, ms(idle), 1)
	return "SELECT" + strings.Replace(set, LeftMs, ms(lock), 1)
}

// ms is d in whole milliseconds, at least one: zero would turn a bound off.
func ms(d time.Duration) string { return strconv.FormatInt(max(d.Milliseconds(), 1), 10) }
