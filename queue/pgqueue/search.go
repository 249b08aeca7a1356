package pgqueue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/jobfence/jobfence/queue"
)

// DefaultScanLimit is the default of ListParams.ScanLimit: the jobs one
// List call reads at most to check the filters that no index serves.
const DefaultScanLimit = 100_000

// ListParams filters List; zero fields do not filter. The filters split in
// two (docs/operations.md, "Finding jobs"):
//
//   - Queue, Kind, State, UniqueKey, UnknownKind, Tag and the ID range
//     (MinID, MaxID, Before, After) select the jobs List reads, through
//     the tables' indexes where one serves them (Tag: a GIN index of the
//     tags; an ID range: the primary key).
//   - Args, Metadata, IdempotencyKey and the time range (CreatedAfter,
//     CreatedBefore) are checked on the jobs read, newest first, and no
//     index serves them (one on the args would tax every insert): a call
//     with any of them reads ScanLimit jobs at most. When it reads that
//     many without filling its page, it returns the jobs it found with a
//     *ScanLimitError, which wraps ErrSearchTooWide and says where to go
//     on from; narrowed by an ID range, a queue, a kind or a tag, the
//     search reads fewer jobs.
type ListParams struct {
	Queue string
	Kind  string
	// State must be one of queue.States(): List refuses an unknown state
	// rather than find no job in it.
	State queue.State
	// UniqueKey finds the job that holds this unique key.
	UniqueKey string
	// UnknownKind lists only the jobs waiting for a worker that knows
	// their kind: put back by one that had no handler for it, and not run
	// since (see UnknownKindCondition).
	UnknownKind bool
	// Tag lists only the jobs tagged with it (queue.EnqueueParams.Tags).
	Tag string
	// Args, a JSON object, lists only the jobs whose args contain it
	// (PostgreSQL's jsonb @>): {"customer":"c1"} finds the jobs whose
	// args have "customer": "c1", among other fields; {"order":{"id":7}}
	// looks into a nested object. Anything but an object is an error
	// wrapping ErrBadListParams.
	Args json.RawMessage
	// Metadata lists only the jobs whose metadata holds every pair of it
	// (the W3C traceparent excepted: it is stored apart).
	Metadata map[string]string
	// IdempotencyKey finds the job whose queue.Job.Key it is
	// ("jobfence-" and a UUID, or the bare UUID).
	IdempotencyKey string
	// MinID and MaxID, when not zero, bound the jobs' IDs, both included.
	MinID, MaxID int64
	// CreatedAfter and CreatedBefore, when not zero, bound when the jobs
	// were enqueued: at or after CreatedAfter, before CreatedBefore.
	CreatedAfter, CreatedBefore time.Time
	// ScanLimit bounds the jobs one call reads to check Args, Metadata,
	// IdempotencyKey and the time range. Zero means DefaultScanLimit.
	ScanLimit int
	// Before and After page through the jobs by ID (keyset paging, which
	// costs the same on the last page as on the first, unlike OFFSET):
	// Before lists the jobs older than ID Before, After the jobs newer than
	// ID After (the Limit oldest of them). Set one at most.
	Before, After int64
	// Limit defaults to 100.
	Limit int
}

// scanned says whether p has a filter that is checked on the jobs read
// (see ListParams).
func (p ListParams) scanned() bool {
	return len(p.Args) > 0 || len(p.Metadata) > 0 || p.IdempotencyKey != "" || !p.CreatedAfter.IsZero() || !p.CreatedBefore.IsZero()
}

// ErrBadListParams reports ListParams that contradict each other or that
// do not parse.
var ErrBadListParams = errors.New("jobfence: bad list parameters")

// ErrSearchTooWide is wrapped by the *ScanLimitError of a search that read
// ListParams.ScanLimit jobs without filling its page.
var ErrSearchTooWide = errors.New("jobfence: search too wide")

// ScanLimitError reports a List call that read its ScanLimit jobs, as
// ListParams explains, without filling its page: the jobs it found come
// back with it, and Next is where the next call goes on (its Before, or
// its After when Ascending).
type ScanLimitError struct {
	// Scanned is how many jobs it read.
	Scanned int
	// Next is the ID of the last job it read.
	Next int64
	// Ascending is set for a page read upward (ListParams.After).
	Ascending bool
}

func (e *ScanLimitError) Error() string {
	dir, param := "below", "Before (--before, before=)"
	if e.Ascending {
		dir, param = "above", "After (--after, after=)"
	}
	return fmt.Sprintf("jobfence: search too wide: read %d jobs, to ID %d, without filling the page: "+
		"narrow it with an ID range, a queue, kind, state or tag, or go on %s ID %d with %s", e.Scanned, e.Next, dir, e.Next, param)
}

// Is makes errors.Is(err, ErrSearchTooWide) true.
func (e *ScanLimitError) Is(target error) bool { return target == ErrSearchTooWide }

// listQuery returns List's statement and arguments for p: a condition for
// each set filter only, so that the planner can use the index that serves
// it (the unique key's, the tags', the primary key's for paging and ID
// ranges) rather than plan for "$1 = empty OR ..." with any value.
//
// With a filter checked on the jobs read (scanned), the statement reads
// at most p.ScanLimit jobs of those the other filters select, newest
// first (oldest first for After), in a subquery whose LIMIT bounds it,
// and marks each with hit_ (it passes the checks) and rn_ (its rank); the
// outer query returns the hits and the last job read (rn_ = ScanLimit),
// and stops once it has p.Limit rows, so a page filled early reads no
// further.
func listQuery(p ListParams, idemKey pgtype.UUID) (string, []any) {
	where, args := jobFilters(nil, nil, p.Queue, p.Kind, p.State)
	add := func(cond string, v any) {
		args = append(args, v)
		where = append(where, fmt.Sprintf(cond, len(args)))
	}
	if p.UniqueKey != "" {
		add("j.unique_key = $%d", p.UniqueKey)
	}
	if p.UnknownKind {
		where = append(where, UnknownKindCondition())
	}
	if p.Tag != "" {
		add("j.tags @> ARRAY[$%d::text]", p.Tag)
	}
	if p.MinID > 0 {
		add("j.id >= $%d", p.MinID)
	}
	if p.MaxID > 0 {
		add("j.id <= $%d", p.MaxID)
	}
	order := "DESC"
	switch {
	case p.Before > 0:
		add("j.id < $%d", p.Before)
	case p.After > 0:
		add("j.id > $%d", p.After)
		order = "ASC"
	}
	var checks []string
	check := func(cond string, v any) {
		args = append(args, v)
		checks = append(checks, fmt.Sprintf(cond, len(args)))
	}
	if len(p.Args) > 0 {
		check("j.args @> $%d::jsonb", string(p.Args))
	}
	if len(p.Metadata) > 0 {
		md, _ := json.Marshal(p.Metadata)
		check("j.metadata @> $%d::jsonb", string(md))
	}
	if idemKey.Valid {
		check("j.idempotency_key = $%d", idemKey)
	}
	if !p.CreatedAfter.IsZero() {
		check("j.created_at >= $%d", p.CreatedAfter)
	}
	if !p.CreatedBefore.IsZero() {
		check("j.created_at < $%d", p.CreatedBefore)
	}
	// Only completed jobs are in the finished table: a list of another
	// state does not read it (its filter would walk every finished job).
	from := "jobfence_jobs"
	if (p.State == "" || p.State == queue.StateCompleted) && !p.UnknownKind {
		from = allJobsSQL
	}
	cond := ""
	if len(where) > 0 {
		cond = " WHERE " + strings.Join(where, " AND ")
	}
	var q string
	if len(checks) == 0 {
		args = append(args, p.Limit)
		q = fmt.Sprintf(`SELECT `+listColumns+`, true AS hit_, 0::bigint AS rn_ FROM `+from+` j`+cond+` ORDER BY j.id %s LIMIT $%d`,
			order, len(args))
	} else {
		args = append(args, p.ScanLimit, p.Limit)
		scan, limit := len(args)-1, len(args)
		q = fmt.Sprintf(`SELECT `+listColumns+`, j.hit_, j.rn_ FROM (
    SELECT j.*, (%[1]s) AS hit_, row_number() OVER (ORDER BY j.id %[2]s) AS rn_
    FROM `+from+` j`+cond+`
    ORDER BY j.id %[2]s LIMIT $%[3]d
) j
WHERE j.hit_ OR j.rn_ = $%[3]d
ORDER BY j.id %[2]s LIMIT $%[4]d`, strings.Join(checks, " AND "), order, scan, limit)
	}
	if order == "ASC" {
		// The page just above After, shown newest first like every page.
		q = `SELECT * FROM (` + q + `) j ORDER BY j.id DESC`
	}
	return q, args
}

// jobFilters appends to where and args a condition for each of queue,
// kind and state that is set, numbering its parameters after args'.
func jobFilters(where []string, args []any, q, kind string, state queue.State) ([]string, []any) {
	for _, f := range []struct{ col, v string }{{"queue", q}, {"kind", kind}, {"state", string(state)}} {
		if f.v != "" {
			args = append(args, f.v)
			where = append(where, fmt.Sprintf("j.%s = $%d", f.col, len(args)))
		}
	}
	return where, args
}

// List returns stored jobs, newest first. An unknown p.State is an error
// wrapping queue.ErrUnknownState; parameters that contradict each other
// or do not parse, one wrapping ErrBadListParams. A search that read
// p.ScanLimit jobs without filling its page returns the jobs it found and
// a *ScanLimitError (see ListParams).
func (c *Client) List(ctx context.Context, p ListParams) ([]*queue.Job, error) {
	return ListIn(ctx, c.pool, p)
}

// ListIn is List through db, for example inside a transaction that has
// not committed yet (jobfencetest.RequireInsertedTx reads jobs so).
func ListIn(ctx context.Context, db DB, p ListParams) ([]*queue.Job, error) {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("pgqueue: list: %w: %s", ErrBadListParams, fmt.Sprintf(format, a...))
	}
	if p.State != "" {
		if _, err := queue.ParseState(string(p.State)); err != nil {
			return nil, fmt.Errorf("pgqueue: list: %w", err)
		}
	}
	switch {
	case p.Before > 0 && p.After > 0:
		return nil, bad("Before and After both set")
	case p.MinID > 0 && p.MaxID > 0 && p.MinID > p.MaxID:
		return nil, bad("MinID %d is above MaxID %d", p.MinID, p.MaxID)
	case !p.CreatedAfter.IsZero() && !p.CreatedBefore.IsZero() && !p.CreatedAfter.Before(p.CreatedBefore):
		return nil, bad("CreatedAfter %s is not before CreatedBefore %s", p.CreatedAfter.Format(time.RFC3339), p.CreatedBefore.Format(time.RFC3339))
	case p.ScanLimit < 0:
		return nil, bad("ScanLimit %d is negative", p.ScanLimit)
	}
	if len(p.Args) > 0 {
		if t := bytes.TrimSpace(p.Args); !json.Valid(t) || len(t) == 0 || t[0] != '{' {
			return nil, bad("Args %q is not a JSON object: give one such as {\"customer\":\"c1\"}", oneLineCut(string(p.Args), 80))
		}
	}
	var key pgtype.UUID
	if p.IdempotencyKey != "" {
		s := strings.TrimPrefix(strings.TrimSpace(p.IdempotencyKey), "jobfence-")
		if err := key.Scan(s); err != nil {
			return nil, bad("IdempotencyKey %q is not a job's key (jobfence- and a UUID)", oneLineCut(p.IdempotencyKey, 80))
		}
	}
	if p.Limit <= 0 {
		p.Limit = 100
	}
	if p.ScanLimit == 0 {
		p.ScanLimit = DefaultScanLimit
	}
	q, args := listQuery(p, key)
	rows, err := db.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("pgqueue: list: %w", err)
	}
	defer rows.Close()
	var jobs []*queue.Job
	var limited *ScanLimitError
	for rows.Next() {
		var hit bool
		var rn int64
		j, err := scanListed(rows, &hit, &rn)
		if err != nil {
			return nil, fmt.Errorf("pgqueue: list: %w", err)
		}
		if p.scanned() && rn == int64(p.ScanLimit) {
			limited = &ScanLimitError{Scanned: p.ScanLimit, Next: j.ID, Ascending: p.After > 0}
		}
		if hit {
			jobs = append(jobs, j)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgqueue: list: %w", err)
	}
	if limited != nil && len(jobs) < p.Limit {
		return jobs, fmt.Errorf("pgqueue: list: %w", limited)
	}
	return jobs, nil
}

// oneLineCut is s on one line, cut to n bytes, for an error message.
func oneLineCut(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
