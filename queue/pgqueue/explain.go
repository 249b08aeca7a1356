package pgqueue

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/jobfence/jobfence/queue"
)

// ClaimPlan is what EXPLAIN (ANALYZE, BUFFERS) found for one claim.
type ClaimPlan struct {
	// Execution is the server's execution time of the claim.
	Execution time.Duration
	// Planning is the server's planning time.
	Planning time.Duration
	// Buffers is the shared buffers the claim touched, hits and reads:
	// finding and locking its jobs, updating them and their index entries.
	Buffers int64
	// FindBuffers is the part of Buffers spent finding and locking the
	// jobs: what grows when the claim's index holds rows it cannot take.
	FindBuffers int64
	// Jobs is how many jobs the claim took.
	Jobs int64
	// Plan is the plan as EXPLAIN's JSON output.
	Plan json.RawMessage
}

// ExplainClaim runs the claim a worker would run with p under EXPLAIN
// (ANALYZE, BUFFERS) in a transaction it rolls back, so no job changes
// hands: a way to see what a claim costs on a table as it is. A fence
// value is still drawn from the sequence when jobs are found (sequences
// do not roll back), which costs nothing but a gap.
//
// Until the rollback the transaction holds the jobs the claim found, and
// other claims skip them: it is bounded (txbound.Begin), so that a client
// frozen before its rollback holds them txbound.Idle, not for as long as
// it stays frozen.
func (c *Client) ExplainClaim(ctx context.Context, p queue.ClaimParams) (ClaimPlan, error) {
	tx, err := c.pool.BeginTx(ctx, pgx.TxOptions{BeginQuery: boundedBegin})
	if err != nil {
		return ClaimPlan{}, fmt.Errorf("pgqueue: explain claim: %w", err)
	}
	defer tx.Rollback(context.Background())
	var raw []byte
	err = tx.QueryRow(ctx, "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) "+claimSQL, claimArgs(p, c.paces.get(p.Queue))...).Scan(&raw)
	if err != nil {
		return ClaimPlan{}, fmt.Errorf("pgqueue: explain claim: %w", err)
	}
	var out []struct {
		Plan      planNode `json:"Plan"`
		Planning  float64  `json:"Planning Time"`
		Execution float64  `json:"Execution Time"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || len(out) != 1 {
		return ClaimPlan{}, fmt.Errorf("pgqueue: explain claim: unexpected EXPLAIN output (%v): %.200s", err, raw)
	}
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	top := out[0].Plan
	cp := ClaimPlan{
		Execution: ms(out[0].Execution), Planning: ms(out[0].Planning),
		Buffers: top.SharedHit + top.SharedRead, Plan: raw,
	}
	if next := top.find("CTE next"); next != nil {
		cp.Jobs = next.ActualRows
	}
	for _, name := range []string{"CTE hi", "CTE lo", "CTE wrap"} {
		if find := top.find(name); find != nil {
			cp.FindBuffers += find.SharedHit + find.SharedRead
		}
	}
	return cp, nil
}

// planNode is a node of EXPLAIN's JSON output.
type planNode struct {
	Subplan    string     `json:"Subplan Name"`
	ActualRows int64      `json:"Actual Rows"`
	SharedHit  int64      `json:"Shared Hit Blocks"`
	SharedRead int64      `json:"Shared Read Blocks"`
	Plans      []planNode `json:"Plans"`
}

// find returns the node of subplan name under n, or nil.
func (n *planNode) find(name string) *planNode {
	if n.Subplan == name {
		return n
	}
	for i := range n.Plans {
		if f := n.Plans[i].find(name); f != nil {
			return f
		}
	}
	return nil
}
