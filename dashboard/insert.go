package dashboard

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// insertForm is what the insert page's form holds, as typed.
type insertForm struct {
	Queue, Kind, Args, Priority, ScheduledAt, MaxAttempts string
}

// insertPage is the data of the insert page.
type insertPage struct {
	Form            insertForm
	DefaultQueue    string
	DefaultPriority int
	DefaultAttempts int
}

// newJob shows the form that inserts a job, with the queue and kind of
// the job list it was opened from filled in. A read-only dashboard has
// none to show.
func (h *handler) newJob(w http.ResponseWriter, r *http.Request) error {
	if h.opts.ReadOnly {
		return &httpError{status: http.StatusForbidden, msg: ErrReadOnly.Error()}
	}
	q := r.URL.Query()
	return h.render(w, r, http.StatusOK, "insert", "Insert a job", time.Time{}, insertPage{
		Form:         insertForm{Queue: q.Get("queue"), Kind: q.Get("kind"), Args: "{}"},
		DefaultQueue: queue.DefaultQueue, DefaultPriority: queue.DefaultPriority, DefaultAttempts: queue.DefaultMaxAttempts,
	})
}

// scheduledLayouts are the times the form takes: what a datetime-local
// input sends (without seconds, or with them), in UTC, and RFC 3339 with
// a zone of its own.
var scheduledLayouts = []string{"2006-01-02T15:04", "2006-01-02T15:04:05", time.RFC3339Nano}

// insertParams reads and checks the insert form. Every refusal says which
// field is wrong and why, so the user can fix it.
func insertParams(r *http.Request) (queue.EnqueueParams, error) {
	f := insertForm{
		Queue: strings.TrimSpace(r.PostFormValue("queue")), Kind: strings.TrimSpace(r.PostFormValue("kind")),
		Args: r.PostFormValue("args"), Priority: strings.TrimSpace(r.PostFormValue("priority")),
		ScheduledAt: strings.TrimSpace(r.PostFormValue("scheduled_at")), MaxAttempts: strings.TrimSpace(r.PostFormValue("max_attempts")),
	}
	p := queue.EnqueueParams{Queue: f.Queue, Kind: f.Kind}
	if p.Kind == "" {
		return p, badRequest("the job needs a kind: the name its handler is registered under")
	}
	args, err := objectJSON(f.Args)
	if err != nil {
		return p, badRequest("args: %v", err)
	}
	p.Args = args
	if f.Priority != "" {
		n, err := strconv.Atoi(f.Priority)
		if err != nil || n < queue.MinPriority || n > queue.MaxPriority {
			return p, badRequest("priority %q: a number from %d (first) to %d (last), or empty for %d", f.Priority, queue.MinPriority, queue.MaxPriority, queue.DefaultPriority)
		}
		p.Priority = n
	}
	if f.MaxAttempts != "" {
		n, err := strconv.Atoi(f.MaxAttempts)
		if err != nil || n < 1 {
			return p, badRequest("max attempts %q: a whole number of at least 1, or empty for %d", f.MaxAttempts, queue.DefaultMaxAttempts)
		}
		p.MaxAttempts = n
	}
	if f.ScheduledAt != "" {
		var t time.Time
		for _, layout := range scheduledLayouts {
			if t, err = time.ParseInLocation(layout, f.ScheduledAt, time.UTC); err == nil {
				break
			}
		}
		if err != nil {
			return p, badRequest("scheduled at %q: a time as YYYY-MM-DDTHH:MM in UTC (or RFC 3339), or empty for now", f.ScheduledAt)
		}
		p.ScheduledAt = t
	}
	if err := p.WithDefaults().Validate(); err != nil {
		return p, badRequest("%v", err)
	}
	return p, nil
}

// objectJSON checks that s is one JSON object, the shape a handler's args
// decode from, and returns it; empty means {}. A syntax error names the
// line and column it is at.
func objectJSON(s string) ([]byte, error) {
	b := bytes.TrimSpace([]byte(s))
	if len(b) == 0 {
		return []byte("{}"), nil
	}
	var v any
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&v); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			line, col := position(b, se.Offset)
			return nil, fmt.Errorf("not valid JSON at line %d, column %d: %v", line, col, err)
		}
		return nil, fmt.Errorf("not valid JSON: %v", err)
	}
	if dec.More() {
		return nil, errors.New("not valid JSON: more than one value; give one object")
	}
	if _, ok := v.(map[string]any); !ok {
		return nil, fmt.Errorf("a JSON object ({...}) is needed, not %s", jsonType(v))
	}
	return b, nil
}

// position turns a byte offset (the byte after the error) into a line and
// column, both from 1.
func position(b []byte, offset int64) (line, col int) {
	if offset > int64(len(b)) {
		offset = int64(len(b))
	}
	before := b[:max(offset-1, 0)]
	line = bytes.Count(before, []byte("\n")) + 1
	col = len(before) - bytes.LastIndexByte(before, '\n')
	return line, col
}

func jsonType(v any) string {
	switch v.(type) {
	case []any:
		return "an array"
	case string:
		return "a string"
	case float64:
		return "a number"
	case bool:
		return "a boolean"
	case nil:
		return "null"
	}
	return fmt.Sprintf("%T", v)
}

// insertJob inserts the job the form describes and shows it.
func (h *handler) insertJob(r *http.Request, _ string) (string, []any, error) {
	p, err := insertParams(r)
	if err != nil {
		return "", []any{"queue", p.Queue, "kind", p.Kind}, err
	}
	res, err := h.client.Enqueue(r.Context(), p)
	attrs := []any{"queue", p.WithDefaults().Queue, "kind", p.Kind, "job", res.ID}
	if err != nil {
		return "", attrs, err
	}
	return fmt.Sprintf("/jobs/%d?done=inserted", res.ID), attrs, nil
}
