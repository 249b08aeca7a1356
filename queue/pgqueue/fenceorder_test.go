package pgqueue_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
)

// TestClaimDrawsFenceAfterLocking: a claim's fence is drawn after its rows
// are locked, so it is newer than anything that happened while the claim
// was still scanning. A row-level security policy stands in for a slow
// scan: it draws a value from the fence sequence as the claim reads each
// candidate row, before the row is locked. The claim's fence must come
// after those of every claimed row; drawn before the scan or beside it,
// it would be older than some.
func TestClaimDrawsFenceAfterLocking(t *testing.T) {
	c, db := newClient(t)
	ctx := context.Background()
	role := db.Schema + "_probe"
	ident := pgx.Identifier{role}.Sanitize()
	schema := pgx.Identifier{db.Schema}.Sanitize()
	setup := []string{
		"CREATE TABLE probe_log (v bigint NOT NULL)",
		`CREATE FUNCTION probe() RETURNS boolean LANGUAGE sql AS
		 $$ INSERT INTO probe_log SELECT nextval('jobfence_fence_seq'); SELECT true $$`,
		"ALTER TABLE jobfence_jobs ENABLE ROW LEVEL SECURITY",
		"CREATE POLICY probe ON jobfence_jobs USING (probe())",
		"CREATE ROLE " + ident,
		"GRANT USAGE ON SCHEMA " + schema + " TO " + ident,
		"GRANT ALL ON ALL TABLES IN SCHEMA " + schema + " TO " + ident,
		"GRANT ALL ON ALL SEQUENCES IN SCHEMA " + schema + " TO " + ident,
	}
	for _, q := range setup {
		if _, err := db.Pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		_, _ = db.Pool.Exec(context.Background(), "DROP OWNED BY "+ident)
		_, _ = db.Pool.Exec(context.Background(), "DROP ROLE "+ident)
	})
	for range 3 {
		if _, err := c.Insert(ctx, emailArgs{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	// The superuser bypasses row-level security: claim as the probe role.
	cfg := db.Pool.Config()
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		_, err := conn.Exec(ctx, "SET ROLE "+ident)
		return err
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	jobs, err := pgqueue.New(pool, pgqueue.Config{}).Claim(ctx, queue.ClaimParams{Queue: "default", Limit: 3, Lease: time.Minute, WorkerID: "probe"})
	if err != nil || len(jobs) != 3 {
		t.Fatalf("claim = %d jobs, %v", len(jobs), err)
	}
	var probes []int64
	if err := db.Pool.QueryRow(ctx, "SELECT array_agg(v ORDER BY v) FROM probe_log").Scan(&probes); err != nil {
		t.Fatal(err)
	}
	// Each claimed row is read (one probe) before it is locked.
	before := 0
	for _, v := range probes {
		if v < jobs[0].Fence {
			before++
		}
	}
	if before < len(jobs) {
		t.Fatalf("fence %d was drawn after only %d of the %d rows were read (probes %v)", jobs[0].Fence, before, len(jobs), probes)
	}
}
