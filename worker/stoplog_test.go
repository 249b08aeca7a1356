package worker_test

import (
	"context"
	"log/slog"
	"reflect"
	"sync"
	"testing"
	"time"
	"unicode"

	"github.com/jobfence/jobfence/internal/pgtest"
	"github.com/jobfence/jobfence/internal/testwatch"
	"github.com/jobfence/jobfence/queue"
	"github.com/jobfence/jobfence/queue/pgqueue"
	"github.com/jobfence/jobfence/worker"
)

// records is a slog.Handler that keeps every record, for tests that read
// a record's attributes rather than its text.
type records struct {
	mu   *sync.Mutex
	all  *[]slog.Record
	with []slog.Attr
}

func newRecords() *records { return &records{mu: &sync.Mutex{}, all: &[]slog.Record{}} }

func (h *records) Enabled(context.Context, slog.Level) bool { return true }

func (h *records) Handle(_ context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(h.with...)
	h.mu.Lock()
	defer h.mu.Unlock()
	*h.all = append(*h.all, r)
	return nil
}

func (h *records) WithAttrs(as []slog.Attr) slog.Handler {
	return &records{mu: h.mu, all: h.all, with: append(append([]slog.Attr{}, h.with...), as...)}
}

// WithGroup is not used by the worker; a group would be lost here.
func (h *records) WithGroup(string) slog.Handler { return h }

// find returns the first record whose message is msg.
func (h *records) find(msg string) (slog.Record, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range *h.all {
		if r.Message == msg {
			return r, true
		}
	}
	return slog.Record{}, false
}

// snake is a Go field name in snake case: FetchErrors is fetch_errors.
func snake(name string) string {
	var b []rune
	for i, r := range name {
		if unicode.IsUpper(r) && i > 0 {
			b = append(b, '_')
		}
		b = append(b, unicode.ToLower(r))
	}
	return string(b)
}

// TestStopLogsStatsAsAttributes: the worker's stop record carries its
// stats as a group of attributes, one per counter of Stats in snake case
// (a log pipeline filters on stats.completed), not as one string of the
// struct.
func TestStopLogsStatsAsAttributes(t *testing.T) {
	db := pgtest.New(t)
	ctx := context.Background()
	c := pgqueue.New(db.Pool, pgqueue.Config{Logger: quietLogger()})
	reg := worker.NewRegistry()
	worker.Add(reg, func(ctx context.Context, job *worker.Job[effectArgs]) error { return nil })
	logs := newRecords()
	w, err := worker.New(c, reg, worker.Config{Logger: slog.New(logs), PollInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if _, err := c.Enqueue(ctx, queue.EnqueueParams{Kind: "effect", Args: []byte(`{"n":1}`)}); err != nil {
			t.Fatal(err)
		}
	}
	testwatch.WaitFor(t, 30*time.Second, "3 jobs completed", func() bool { return w.Stats().Completed == 3 })
	stopCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := w.Stop(stopCtx); err != nil {
		t.Fatal(err)
	}

	r, ok := logs.find("jobfence: worker stopped")
	if !ok {
		t.Fatal("no record says the worker stopped")
	}
	var stats []slog.Attr
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "stats" {
			if v := a.Value.Resolve(); v.Kind() == slog.KindGroup {
				stats = v.Group()
			} else {
				t.Errorf("stats is a %s: %v, want a group of attributes", v.Kind(), v)
			}
		}
		return true
	})
	got := map[string]slog.Value{}
	for _, a := range stats {
		got[a.Key] = a.Value
	}
	fields := reflect.VisibleFields(reflect.TypeFor[worker.Stats]())
	if len(got) != len(fields) {
		t.Errorf("stats has %d attributes, want one per counter of Stats (%d): %v", len(got), len(fields), stats)
	}
	for _, f := range fields {
		if v, ok := got[snake(f.Name)]; !ok || v.Kind() != slog.KindInt64 {
			t.Errorf("stats.%s (Stats.%s) = %v, want an int64 attribute", snake(f.Name), f.Name, v)
		}
	}
	if got["completed"].Int64() != 3 || got["claimed"].Int64() != 3 || got["panics"].Int64() != 0 {
		t.Errorf("stats: completed %v, claimed %v, panics %v; want 3, 3, 0", got["completed"], got["claimed"], got["panics"])
	}
}
