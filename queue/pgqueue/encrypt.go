package pgqueue

import (
	"context"
	"fmt"
	"slices"

	"github.com/jobfence/jobfence/queue"
)

// sealTasks returns p with the args of each task that the client's key
// ring encrypts sealed (a task cannot be unique, so it has no hash to
// key). A task that asks for encryption without a ring is refused, as
// Enqueue refuses such a job.
func (c *Client) sealTasks(p queue.WorkflowParams) (queue.WorkflowParams, error) {
	ring := c.cfg.Encryption
	var tasks []queue.WorkflowTask
	for i, t := range p.Tasks {
		if t.Params.Encrypt && ring == nil {
			return p, fmt.Errorf("pgqueue: insert workflow: task %q: %w", t.Name, &queue.KeyError{Kind: t.Params.Kind,
				Reason: "the args ask to be encrypted (EncryptedArgs or EnqueueParams.Encrypt) but the client has no encryption keys (Config.Encryption); nothing was inserted"})
		}
		if !ring.Encrypts(t.Params) {
			continue
		}
		if tasks == nil {
			tasks = slices.Clone(p.Tasks)
		}
		args := t.Params.WithDefaults().Args
		sealed, err := ring.Seal(t.Params.Kind, args)
		if err != nil {
			return p, fmt.Errorf("pgqueue: insert workflow: task %q: %w", t.Name, err)
		}
		tasks[i].Params.Args = sealed
	}
	if tasks != nil {
		p.Tasks = tasks
	}
	return p, nil
}

// DefaultRotateBatch is the default of RotateOpts.Batch.
const DefaultRotateBatch = 500

// RotateOpts tune RotateEncryption.
type RotateOpts struct {
	// Batch bounds the jobs each statement reads (and so rewrites): each
	// batch is a read of at most Batch jobs of each table in id order and
	// one UPDATE of those sealed under an old key, each statement its own
	// short transaction. Zero means DefaultRotateBatch.
	Batch int
	// After resumes a rotation: only jobs with IDs above it are read
	// (RotateProgress.Cursor of an earlier run). Zero: from the first job.
	After int64
	// Progress, when set, is called after each batch.
	Progress func(RotateProgress)
}

// RotateProgress is where a rotation stands.
type RotateProgress struct {
	// Cursor is the highest job ID read so far: RotateOpts.After resumes
	// from it.
	Cursor int64
	// Scanned counts the jobs read, Rewritten those re-sealed under the
	// current key.
	Scanned, Rewritten int64
	// Skipped counts the jobs sealed under an old key that were not
	// rewritten: one whose args changed or that moved between the live
	// and finished tables between the read and the UPDATE (a later pass
	// finds it), and one sealed under a key the ring lacks (see
	// MissingKeys).
	Skipped int64
	// MissingKeys names the keys, absent from the ring, that sealed the
	// args of jobs it read: add them to the ring and run again.
	MissingKeys []string
}

// rotateScanSQL reads the next Batch ($2) jobs of a table after ID $1 and
// returns the args of those sealed under a key other than the current
// one ($3 is SealedPrefix and the current key's ID and ':'); the others
// come back with NULL args, to move the cursor. An index scan of the
// table's id index, bounded by the LIMIT.
const rotateScanSQL = `
SELECT id, kind, CASE WHEN jsonb_typeof(args) = 'string' AND starts_with(args #>> '{}', $4)
                       AND NOT starts_with(args #>> '{}', $3) THEN args END
FROM %s WHERE id > $1 ORDER BY id LIMIT $2`

// rotateUpdateSQL writes the re-sealed args of a batch, each only where
// the row still holds the args that were read: args that changed meanwhile
// are left to the next pass.
const rotateUpdateSQL = `
UPDATE %s j SET args = u.new
FROM unnest($1::bigint[], $2::jsonb[], $3::jsonb[]) AS u(id, old, new)
WHERE j.id = u.id AND j.args = u.old`

// RotateEncryption re-seals, under the key ring's current key, the args of
// every stored job (live and finished) sealed under another key of the
// ring, online: in batches of RotateOpts.Batch jobs, each read and each
// rewrite a short statement of its own, so claims, completions and
// inserts go on meanwhile (a claim skips a row for the moment its UPDATE
// holds it). It makes one pass in job ID order and returns where it ended;
// a job that moved between tables during the pass may be left under its
// old key (RotateProgress.Skipped): run it again until Rewritten and
// Skipped are zero. Stopped (ctx ended), it returns the progress made and
// ctx's error; RotateOpts.After resumes from Cursor. The client needs
// Config.Encryption.
func (c *Client) RotateEncryption(ctx context.Context, opts RotateOpts) (RotateProgress, error) {
	ring := c.cfg.Encryption
	p := RotateProgress{Cursor: opts.After}
	if ring == nil {
		return p, fmt.Errorf("pgqueue: rotate encryption: %w: the client has no key ring (Config.Encryption)", queue.ErrEncryptionKey)
	}
	batch := opts.Batch
	if batch <= 0 {
		batch = DefaultRotateBatch
	}
	missing := map[string]bool{}
	for {
		// One window of IDs for both tables: the live table's next batch,
		// cut to the finished table's next batch, so that each read stays
		// bounded and a job (which is in one table or the other) is
		// passed once.
		upTo, done := int64(0), true
		for _, table := range []string{"jobfence_jobs", "jobfence_jobs_finished"} {
			var last *int64
			err := c.pool.QueryRow(ctx, fmt.Sprintf(`SELECT max(id) FROM (SELECT id FROM %s WHERE id > $1 ORDER BY id LIMIT $2) w`, table),
				p.Cursor, batch).Scan(&last)
			if err != nil {
				return p, fmt.Errorf("pgqueue: rotate encryption: read %s: %w", table, err)
			}
			if last == nil {
				continue // nothing left in this table
			}
			done = false
			if upTo == 0 || *last < upTo {
				upTo = *last
			}
		}
		if done {
			break
		}
		for _, table := range []string{"jobfence_jobs", "jobfence_jobs_finished"} {
			if err := c.rotateWindow(ctx, ring, table, p.Cursor, upTo, batch, &p, missing); err != nil {
				return p, err
			}
		}
		p.Cursor = upTo
		p.MissingKeys = sortedKeys(missing)
		if opts.Progress != nil {
			opts.Progress(p)
		}
		if err := ctx.Err(); err != nil {
			return p, err
		}
	}
	p.MissingKeys = sortedKeys(missing)
	return p, nil
}

// rotateWindow re-seals the jobs of table with IDs in (after, upTo] sealed
// under an old key, adding to p.
func (c *Client) rotateWindow(ctx context.Context, ring *queue.KeyRing, table string, after, upTo int64, batch int, p *RotateProgress, missing map[string]bool) error {
	current := queue.SealedPrefix + ring.Current() + ":"
	rows, err := c.pool.Query(ctx, fmt.Sprintf(rotateScanSQL, table), after, batch, current, queue.SealedPrefix)
	if err != nil {
		return fmt.Errorf("pgqueue: rotate encryption: read %s: %w", table, err)
	}
	var ids []int64
	var olds, news [][]byte
	for rows.Next() {
		var id int64
		var kind string
		var args []byte
		if err := rows.Scan(&id, &kind, &args); err != nil {
			rows.Close()
			return fmt.Errorf("pgqueue: rotate encryption: read %s: %w", table, err)
		}
		if id > upTo {
			continue
		}
		p.Scanned++
		if args == nil {
			continue
		}
		sealed, changed, err := ring.Reseal(kind, args)
		if err != nil {
			if key, ok := queue.SealedKey(args); ok && !slices.Contains(ring.IDs(), key) {
				missing[key] = true
			}
			p.Skipped++
			continue
		}
		if changed {
			ids, olds, news = append(ids, id), append(olds, args), append(news, sealed)
		}
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgqueue: rotate encryption: read %s: %w", table, err)
	}
	if len(ids) == 0 {
		return nil
	}
	tag, err := c.pool.Exec(ctx, fmt.Sprintf(rotateUpdateSQL, table), ids, olds, news)
	if err != nil {
		return fmt.Errorf("pgqueue: rotate encryption: rewrite %s: %w", table, err)
	}
	p.Rewritten += tag.RowsAffected()
	p.Skipped += int64(len(ids)) - tag.RowsAffected()
	return nil
}

// sortedKeys returns m's keys, sorted; nil for none.
func sortedKeys(m map[string]bool) []string {
	if len(m) == 0 {
		return nil
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
