package dashboard

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// uniqueness is what makes a job unique by its UniqueOpts, for its page:
// the key jobfence computed (the job has no UniqueKey then, and its page
// used to say "-" as if nothing made it unique).
type uniqueness struct {
	// Hash is the computed key, a SHA-256, in hex.
	Hash string
	// Parts says what the key was computed from: "kind", "kind and args",
	// "kind and queue" or "kind, args and queue" when the key is one of
	// those (the job's own kind, args and queue give it again), or a
	// sentence saying that some args fields or a period went into it:
	// which ones is not recorded with the job, only the key.
	Parts string
	// States are the states in which the job refuses a duplicate.
	States []queue.State
	// Holds reports that the job's state is one of States: an insert of a
	// duplicate is refused now.
	Holds bool
	// HolderID is another job that holds the key now (a duplicate
	// inserted after this job left States); 0 when none does.
	HolderID int64
}

// StatesText is States as "available, scheduled, …".
func (u *uniqueness) StatesText() string {
	names := make([]string, len(u.States))
	for i, s := range u.States {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// holderSQL finds the job that holds a computed key now, through the
// unique index whose predicate it repeats (jobfence_jobs_unique_hash): one
// probe.
const holderSQL = `SELECT id FROM jobfence_jobs
WHERE unique_hash = $1 AND jobfence_state_in_bitmask(unique_states, state) AND id <> $2`

// readUniqueness describes j's computed key hash and its states' bitmask
// mask (the job's unique_hash and unique_states); nil for a job without
// one.
func (h *handler) readUniqueness(ctx context.Context, j *queue.Job, hash []byte, mask *int16, sealed, opened bool) (*uniqueness, error) {
	if len(hash) == 0 || mask == nil {
		return nil, nil
	}
	u := &uniqueness{Hash: hex.EncodeToString(hash)}
	switch {
	case sealed && !opened:
		// The key is a MAC of the plaintext: without the ring it cannot be
		// computed again.
		u.Parts = "kind and perhaps args, queue or period: the args are encrypted and this dashboard lacks their key"
	case sealed:
		u.Parts = uniqueParts(j, hash, h.opts.Encryption)
	default:
		u.Parts = uniqueParts(j, hash, nil)
	}
	for _, s := range queue.States() {
		if *mask&queue.StateBitmask([]queue.State{s}) != 0 {
			u.States = append(u.States, s)
			u.Holds = u.Holds || s == j.State
		}
	}
	if !u.Holds {
		err := h.pool.QueryRow(ctx, holderSQL, hash, j.ID).Scan(&u.HolderID)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return nil, fmt.Errorf("dashboard: job %d: holder of its unique key: %w", j.ID, err)
		}
	}
	return u, nil
}

// uniqueParts says what j's computed key hash was made of. The options
// are not stored with the job, only the key; but a key of the kind and
// optionally the args (all of them) and the queue is computed again from
// the job and compared. A key of some args fields or of a period is not
// told apart: the fields and the period's length could be anything.
//
// For an encrypted job, j holds the opened args and ring its key ring:
// the key is then the ring's MAC (queue.EnqueueParams.UniqueHashFor).
func uniqueParts(j *queue.Job, hash []byte, ring *queue.KeyRing) string {
	for _, c := range []struct {
		opts  queue.UniqueOpts
		parts string
	}{
		{queue.UniqueOpts{}, "kind"},
		{queue.UniqueOpts{ByArgs: true}, "kind and args"},
		{queue.UniqueOpts{ByQueue: true}, "kind and queue"},
		{queue.UniqueOpts{ByArgs: true, ByQueue: true}, "kind, args and queue"},
	} {
		p := queue.EnqueueParams{Kind: j.Kind, Queue: j.Queue, Args: j.EncodedArgs, Unique: &c.opts, Encrypt: ring != nil}
		if got, err := p.UniqueHashFor(j.ScheduledAt, ring); err == nil && bytes.Equal(got, hash) {
			return c.parts
		}
	}
	return "kind and some of: args fields (ByFields or tagged ones), queue, period (ByPeriod); which ones is not recorded with the job"
}
