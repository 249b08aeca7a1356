// Package txbound holds the SQL that bounds a lease holder's transaction by
// the lease its row has left, by the database's clock. A holder frozen
// while its transaction holds the row (SIGSTOP, a paused VM) would keep the
// row locked, and the lease taken, until it woke; with these bounds
// PostgreSQL ends the transaction (and its session) once the lease is
// gone, so the job or key is taken over then. The worker's transactional
// handlers (pgqueue.CompleteTx) and idempotency.DoTx both use it.
package txbound

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
