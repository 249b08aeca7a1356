package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/jackc/pgx/v5"
)

// keysPageSize is how many keys, and how many results, one page shows.
const keysPageSize = 50

// maxScopes caps the scopes /keys lists.
const maxScopes = 500

// scopesSQL lists the scopes of idempotency keys and fenced results by
// skipping from one scope to the next on each primary key (scope, key)
// (a loose index scan): a handful of index probes per scope, however many
// keys each holds, where SELECT DISTINCT would read every key.
const scopesSQL = `
WITH RECURSIVE k AS (
    (SELECT scope FROM jobfence_idempotency_keys ORDER BY scope LIMIT 1)
    UNION ALL
    SELECT (SELECT scope FROM jobfence_idempotency_keys WHERE scope > k.scope ORDER BY scope LIMIT 1)
    FROM k WHERE k.scope IS NOT NULL
), r AS (
    (SELECT scope FROM jobfence_results ORDER BY scope LIMIT 1)
    UNION ALL
    SELECT (SELECT scope FROM jobfence_results WHERE scope > r.scope ORDER BY scope LIMIT 1)
    FROM r WHERE r.scope IS NOT NULL
)
SELECT scope FROM k WHERE scope IS NOT NULL
UNION
SELECT scope FROM r WHERE scope IS NOT NULL
ORDER BY 1 LIMIT $1`

// keysSQL reads a page of a scope's idempotency keys in key order.
const keysSQL = `
SELECT key, state, fence, lease_expires_at, fingerprint, length(response), created_at, completed_at, expires_at
FROM jobfence_idempotency_keys WHERE scope = $1 AND key > $2 ORDER BY key LIMIT $3`

// resultsSQL reads a page of a scope's fenced results in key order.
const resultsSQL = `
SELECT key, fence, length(value), updated_at
FROM jobfence_results WHERE scope = $1 AND key > $2 ORDER BY key LIMIT $3`

// keyRow is one idempotency key. The stored response is user data that
// may be sensitive: the page shows its size only.
type keyRow struct {
	Key, State, Fingerprint                string
	Fence                                  int64
	ResponseBytes                          int
	LeaseExpiresAt, CreatedAt, CompletedAt time.Time
	ExpiresAt                              time.Time
}

// resultRow is one fenced result; its value is shown by size only.
type resultRow struct {
	Key        string
	Fence      int64
	ValueBytes int
	UpdatedAt  time.Time
}

// keysPage is /keys' data.
type keysPage struct {
	Scopes  []string
	Scope   string
	Keys    []keyRow
	Results []resultRow
	// NextKeys and NextResults link to the next page of each table.
	NextKeys, NextResults string
}

// keys serves /keys: the scopes, and for the chosen scope its
// idempotency keys (state, fence, lease, expiry) and fenced results, a page
// at a time by key.
func (h *handler) keys(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	q := r.URL.Query()
	p := keysPage{Scope: q.Get("scope")}
	rows, err := h.pool.Query(ctx, scopesSQL, maxScopes)
	if err != nil {
		return fmt.Errorf("dashboard: scopes: %w", err)
	}
	if p.Scopes, err = pgx.CollectRows(rows, pgx.RowTo[string]); err != nil {
		return fmt.Errorf("dashboard: scopes: %w", err)
	}
	if p.Scope == "" && len(p.Scopes) > 0 {
		p.Scope = p.Scopes[0]
	}
	if p.Scope != "" {
		if err := h.readKeys(ctx, &p, q.Get("keys_after"), q.Get("results_after")); err != nil {
			return err
		}
	}
	return h.render(w, r, http.StatusOK, "keys", "Keys", time.Time{}, p)
}

// readKeys fills in a page of p.Scope's keys after keysAfter and of its
// results after resultsAfter, and the links to the pages after them.
func (h *handler) readKeys(ctx context.Context, p *keysPage, keysAfter, resultsAfter string) error {
	rows, err := h.pool.Query(ctx, keysSQL, p.Scope, keysAfter, keysPageSize+1)
	if err != nil {
		return fmt.Errorf("dashboard: keys: %w", err)
	}
	p.Keys, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (keyRow, error) {
		var k keyRow
		var lease, completed *time.Time
		var size *int32
		err := row.Scan(&k.Key, &k.State, &k.Fence, &lease, &k.Fingerprint, &size, &k.CreatedAt, &completed, &k.ExpiresAt)
		k.LeaseExpiresAt, k.CompletedAt = derefTime(lease), derefTime(completed)
		if size != nil {
			k.ResponseBytes = int(*size)
		}
		return k, err
	})
	if err != nil {
		return fmt.Errorf("dashboard: keys: %w", err)
	}
	rows, err = h.pool.Query(ctx, resultsSQL, p.Scope, resultsAfter, keysPageSize+1)
	if err != nil {
		return fmt.Errorf("dashboard: results: %w", err)
	}
	p.Results, err = pgx.CollectRows(rows, func(row pgx.CollectableRow) (resultRow, error) {
		var res resultRow
		var size *int32
		err := row.Scan(&res.Key, &res.Fence, &size, &res.UpdatedAt)
		if size != nil {
			res.ValueBytes = int(*size)
		}
		return res, err
	})
	if err != nil {
		return fmt.Errorf("dashboard: results: %w", err)
	}
	next := func(param, after string) string {
		v := url.Values{"scope": {p.Scope}, param: {after}}
		return h.opts.BasePath + "/keys?" + v.Encode()
	}
	if len(p.Keys) > keysPageSize {
		p.Keys = p.Keys[:keysPageSize]
		p.NextKeys = next("keys_after", p.Keys[keysPageSize-1].Key)
	}
	if len(p.Results) > keysPageSize {
		p.Results = p.Results[:keysPageSize]
		p.NextResults = next("results_after", p.Results[keysPageSize-1].Key)
	}
	return nil
}

// derefTime is *t, or the zero time for NULL.
func derefTime(t *time.Time) time.Time {
	if t == nil {
		return time.Time{}
	}
	return *t
}
