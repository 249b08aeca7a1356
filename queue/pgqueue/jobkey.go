package pgqueue

import (
	"crypto/rand"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// A job's idempotency key (queue.Job.IdempotencyKey) is "jobfence-<uuid>",
// a random UUID (version 4) drawn here when the job is inserted and kept
// in its row (jobfence_jobs.idempotency_key, migration 00010): the same on
// every attempt, read back by every claim, Get and List.
//
// Why a random key per job rather than a per-database identity made at
// migration ("jobfence-<database id>-<job id>"): the identity would be
// copied with the database. A staging database restored from a production
// backup or disk snapshot (the usual way to get one) carries production's
// identity and continues its ID sequence, so the next jobs of the two get
// the same keys for different charges, which is the collision the key
// exists to prevent; and a database whose ID sequence is reset (TRUNCATE
// ... RESTART IDENTITY) reuses its own keys. A random key is unique
// whatever is copied or reset; a copied job keeps its key, rightly, since
// it is the same job. It costs 16 bytes a row and a draw from the
// operating system's generator per insert, and no read at start.
//
// Drawn by the client, not by a column default: gen_random_uuid() is
// built in from PostgreSQL 13 only (jobfence supports 12), and a volatile
// default added with the column would rewrite the table under its lock.
// A job inserted some other way (by hand, or by a release before 00010)
// has none and keeps the key its earlier attempts used:
// "jobfence-job-<id>".
func newJobKey() pgtype.UUID { return newJobKeys(1)[0] }

// newJobKeys draws n keys with one read of the generator (EnqueueMany's
// jobs share it rather than make a system call each).
func newJobKeys(n int) []pgtype.UUID {
	b := make([]byte, 16*n)
	rand.Read(b) // never fails: see crypto/rand.Read
	keys := make([]pgtype.UUID, n)
	for i := range keys {
		u := &keys[i]
		u.Valid = true
		copy(u.Bytes[:], b[16*i:])
		u.Bytes[6] = u.Bytes[6]&0x0f | 0x40
		u.Bytes[8] = u.Bytes[8]&0x3f | 0x80
	}
	return keys
}

// jobKey formats a stored key as Job.Key: "" for none.
func jobKey(u pgtype.UUID) string {
	if !u.Valid {
		return ""
	}
	const hexDigits = "0123456789abcdef"
	const prefix = "jobfence-"
	b := make([]byte, len(prefix)+36)
	copy(b, prefix)
	j := len(prefix)
	for i, c := range u.Bytes {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			b[j] = '-'
			j++
		}
		b[j], b[j+1] = hexDigits[c>>4], hexDigits[c&0x0f]
		j += 2
	}
	return string(b)
}

// timeoutParam is an EnqueueParams.Timeout as stored in timeout_us: NULL
// for none, -1 for no timeout at all, and at least a microsecond else.
func timeoutParam(d time.Duration) *int64 {
	var us int64
	switch {
	case d == 0:
		return nil
	case d < 0:
		us = -1
	default:
		us = max(d.Microseconds(), 1)
	}
	return &us
}

// jobTimeout is a stored timeout_us as Job.Timeout.
func jobTimeout(us *int64) time.Duration {
	switch {
	case us == nil:
		return 0
	case *us < 0:
		return -1
	}
	return time.Duration(*us) * time.Microsecond
}

// deadlineParam is an EnqueueParams.Deadline as stored: NULL for none.
func deadlineParam(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}
