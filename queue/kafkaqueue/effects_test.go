package kafkaqueue

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
)

// The tests' job effect: one row per job, written under the job's fence.
// A write under a lower or equal fence than the row's changes nothing.
const (
	createEffects = `CREATE TABLE effects (
	msg_key text PRIMARY KEY,
	seq     int NOT NULL,
	fence   bigint NOT NULL,
	member  text NOT NULL,
	applied int NOT NULL DEFAULT 1
)`
	upsertEffect = `INSERT INTO effects (msg_key, seq, fence, member) VALUES ($1, $2, $3, $4)
ON CONFLICT (msg_key) DO UPDATE SET fence = EXCLUDED.fence, member = EXCLUDED.member, applied = effects.applied + 1
WHERE effects.fence < EXCLUDED.fence
RETURNING applied`
)

type seqArgs struct {
	Seq int `json:"seq"`
}

// effectResult says what one fenced effect write did.
type effectResult int

const (
	effectInserted effectResult = iota + 1 // first write of the job
	effectTakeover                         // a higher fence rewrote it: the job ran again
	effectRejected                         // a lower or equal fence: nothing written
)

// writeEffect applies j's effect under j.Fence.
func writeEffect(ctx context.Context, pool *pgxpool.Pool, j *queue.Job, member string) (effectResult, error) {
	var a seqArgs
	if err := json.Unmarshal(j.EncodedArgs, &a); err != nil {
		return 0, err
	}
	var applied int
	err := pool.QueryRow(ctx, upsertEffect, j.IdempotencyKey(), a.Seq, j.Fence, member).Scan(&applied)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return effectRejected, nil
	case err != nil:
		return 0, err
	case applied == 1:
		return effectInserted, nil
	}
	return effectTakeover, nil
}

func setupEffects(t testing.TB, pool *pgxpool.Pool) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), createEffects); err != nil {
		t.Fatal(err)
	}
}

func countEffects(t testing.TB, pool *pgxpool.Pool) (rows, seqs int) {
	t.Helper()
	err := pool.QueryRow(context.Background(), `SELECT count(*), count(DISTINCT seq) FROM effects`).Scan(&rows, &seqs)
	if err != nil {
		t.Fatal(err)
	}
	return rows, seqs
}
