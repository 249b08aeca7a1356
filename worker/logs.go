package worker

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jobfence/jobfence/queue"
)

// DefaultLogMaxBytes is LogsConfig.MaxBytes's default: 8 KiB.
const DefaultLogMaxBytes = 8 << 10

// DefaultLogMaxRecords is LogsConfig.MaxRecords's default: 100.
const DefaultLogMaxRecords = 100

// DefaultLogAttempts is LogsConfig.Attempts's default: 10.
const DefaultLogAttempts = 10

// LogsConfig bounds the per-attempt logs that handlers write through
// Logger. The zero value stores them with the defaults below.
type LogsConfig struct {
	// MaxBytes caps one attempt's stored records, counted as their
	// messages' and attributes' lengths: past it, the earliest records are
	// dropped, and counted (queue.AttemptLogs.Dropped). Default:
	// DefaultLogMaxBytes (8 KiB).
	MaxBytes int
	// MaxRecords caps how many records one attempt stores, the same way.
	// Default: DefaultLogMaxRecords (100).
	MaxRecords int
	// Attempts is how many of a job's attempts keep their logs: storing
	// an attempt's deletes those of the earlier attempts past it, counted
	// (queue.AttemptLogs.Pruned). Default: DefaultLogAttempts (10).
	Attempts int
	// Level is the least level stored; records below it go to the
	// worker's Logger only (if it is enabled for them). Default:
	// slog.LevelInfo (the zero value).
	Level slog.Level
	// Disabled stores nothing: Logger writes to the worker's Logger only,
	// as it does outside a handler.
	Disabled bool
}

func (c LogsConfig) withDefaults() LogsConfig {
	if c.MaxBytes <= 0 {
		c.MaxBytes = DefaultLogMaxBytes
	}
	if c.MaxRecords <= 0 {
		c.MaxRecords = DefaultLogMaxRecords
	}
	if c.Attempts <= 0 {
		c.Attempts = DefaultLogAttempts
	}
	return c
}

// Logger returns a logger for the handler whose context ctx is. Each
// record goes to the worker's Config.Logger (if it is enabled for the
// record's level), with the job's attributes (job, kind, queue, attempt,
// fence), so nothing is lost from the process's log; and the records at
// LogsConfig.Level or above are kept in memory for the attempt, within
// its bounds (LogsConfig: the latest records are kept, the earlier
// dropped and counted), and stored with the attempt once its handler
// returned, under its fence, just before its outcome is sent: in one
// statement for the batch of outcomes the attempt's goes in (an AddTx
// handler's, before its transaction's completion). Readers (pgqueue's Get
// as queue.Job.Logs, `jobfence jobs show`, the dashboard's job page) see
// each attempt's records beside its error.
//
// An attempt that lost its job (its lease ran out and another worker
// claimed it) stores nothing: its records are in the process's log only,
// and never replace or join the next attempt's. A job whose handler logs
// nothing costs nothing more: no statement is sent for it. Storing is
// best effort: a failed write is logged and the outcome is sent anyway.
// The records of an attempt whose process dies are lost with it, as its
// outcome is, but for what reached the process's log.
//
// Outside a handler, and once the handler returned, it returns a logger
// that writes to the worker's Logger only (with the job's attributes
// when ctx is a handler's), so code shared between handlers and other
// paths may call it anywhere; outside any worker, that is
// slog.Default(). It stores nothing either on a backend that does not
// store logs (queue.LogRecorder) or with LogsConfig.Disabled.
func Logger(ctx context.Context) *slog.Logger {
	rc, _ := ctx.Value(runCtxKey{}).(*runCtx)
	if rc == nil {
		return slog.Default()
	}
	if l := rc.logger.Load(); l != nil {
		return l
	}
	// Made at the first call, so that a job whose handler never logs
	// allocates nothing for it.
	next := rc.w.log.With(attrsAny(jobAttrs(rc.r.job))...).Handler()
	var l *slog.Logger
	rec, ok := rc.backend.(queue.LogRecorder)
	if ok && !rc.w.cfg.AttemptLogs.Disabled {
		l = slog.New(&attemptHandler{next: next, buf: &attemptLog{cfg: rc.w.cfg.AttemptLogs, rec: rec}})
	} else {
		l = slog.New(next)
	}
	if !rc.logger.CompareAndSwap(nil, l) {
		l = rc.logger.Load()
	}
	return l
}

// attrsAny converts attrs for slog.Logger.With.
func attrsAny(attrs []slog.Attr) []any {
	out := make([]any, len(attrs))
	for i, a := range attrs {
		out[i] = a
	}
	return out
}

// attemptLog is one attempt's records, kept in memory within the bounds
// until the attempt ends.
type attemptLog struct {
	cfg LogsConfig
	rec queue.LogRecorder

	mu      sync.Mutex
	records []queue.LogRecord
	bytes   int
	dropped int
	// ended is set once the records were taken for storing: later ones go
	// to the worker's logger only.
	ended bool
}

// add keeps r, dropping the earliest records past the bounds.
func (b *attemptLog) add(r queue.LogRecord) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return
	}
	if r.Size() > b.cfg.MaxBytes {
		b.dropped++
		return
	}
	b.records = append(b.records, r)
	b.bytes += r.Size()
	n := 0
	for len(b.records)-n > b.cfg.MaxRecords || b.bytes > b.cfg.MaxBytes {
		b.bytes -= b.records[n].Size()
		n++
	}
	if n > 0 {
		b.dropped += n
		// Moved down rather than resliced, so the array does not creep
		// forward and grow for ever under a chatty handler.
		b.records = b.records[:copy(b.records, b.records[n:])]
	}
}

// take ends the buffer and returns what it kept.
func (b *attemptLog) take() (records []queue.LogRecord, dropped int, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.ended {
		return nil, 0, false
	}
	b.ended = true
	return b.records, b.dropped, len(b.records) > 0 || b.dropped > 0
}

// attemptHandler is the slog.Handler of Logger within a handler: it hands
// each record to next (the worker's logger's handler) and keeps those at
// the configured level or above in buf.
type attemptHandler struct {
	next slog.Handler
	buf  *attemptLog
	// attrs are the logger's own attributes (With), as text, and prefix
	// its open groups (WithGroup), dotted.
	attrs  string
	prefix string
}

// Enabled reports whether next takes the level or buf keeps it.
func (h *attemptHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= h.buf.cfg.Level || h.next.Enabled(ctx, level)
}

// Handle hands r to next if it takes its level, and keeps it in buf if at
// the stored level.
func (h *attemptHandler) Handle(ctx context.Context, r slog.Record) error {
	var err error
	if h.next.Enabled(ctx, r.Level) {
		err = h.next.Handle(ctx, r)
	}
	if r.Level >= h.buf.cfg.Level {
		var sb strings.Builder
		sb.WriteString(h.attrs)
		r.Attrs(func(a slog.Attr) bool {
			appendAttr(&sb, h.prefix, a)
			return true
		})
		at := r.Time
		if at.IsZero() {
			at = time.Now()
		}
		h.buf.add(queue.LogRecord{At: at.UTC(), Level: r.Level.String(), Message: r.Message, Attrs: sb.String()})
	}
	return err
}

// WithAttrs returns a handler whose records carry attrs.
func (h *attemptHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	if len(attrs) == 0 {
		return h
	}
	var sb strings.Builder
	sb.WriteString(h.attrs)
	for _, a := range attrs {
		appendAttr(&sb, h.prefix, a)
	}
	return &attemptHandler{next: h.next.WithAttrs(attrs), buf: h.buf, attrs: sb.String(), prefix: h.prefix}
}

// WithGroup returns a handler whose later attributes are in group name.
func (h *attemptHandler) WithGroup(name string) slog.Handler {
	if name == "" {
		return h
	}
	return &attemptHandler{next: h.next.WithGroup(name), buf: h.buf, attrs: h.attrs, prefix: h.prefix + name + "."}
}

// appendAttr writes a as key=value (slog's text form, a group's
// attributes under dotted keys), space-separated from what sb holds.
func appendAttr(sb *strings.Builder, prefix string, a slog.Attr) {
	v := a.Value.Resolve()
	if v.Kind() == slog.KindGroup {
		p := prefix
		if a.Key != "" {
			p += a.Key + "."
		}
		for _, g := range v.Group() {
			appendAttr(sb, p, g)
		}
		return
	}
	if a.Equal(slog.Attr{}) {
		return
	}
	if sb.Len() > 0 {
		sb.WriteByte(' ')
	}
	sb.WriteString(prefix)
	sb.WriteString(a.Key)
	sb.WriteByte('=')
	var s string
	switch v.Kind() {
	case slog.KindTime:
		s = v.Time().Format(time.RFC3339Nano)
	case slog.KindAny:
		if e, ok := v.Any().(error); ok {
			s = e.Error()
		} else {
			s = v.String()
		}
	default:
		s = v.String()
	}
	if s == "" || strings.ContainsAny(s, " =\"\t\n\r") || !strconv.CanBackquote(s) {
		s = strconv.Quote(s)
	}
	sb.WriteString(s)
}

// takeLogs ends r's attempt's records and returns what it kept, nil if it
// kept nothing (its handler never logged, or its records are not
// stored). A handler that never called Logger costs a pointer load.
func (r *running) takeLogs() *queue.AttemptLogs {
	if r.rc == nil {
		return nil
	}
	l := r.rc.logger.Load()
	if l == nil {
		return nil
	}
	h, ok := l.Handler().(*attemptHandler)
	if !ok {
		return nil
	}
	records, dropped, some := h.buf.take()
	if !some {
		return nil
	}
	return &queue.AttemptLogs{Attempt: r.job.Attempt, Fence: r.job.Fence, Records: records, Dropped: dropped}
}

// recordLogs stores the logs of the batch's attempts that kept some, in
// one round trip before their outcomes are sent, bounded by the lease;
// best effort: a failure is logged (the records are in the process's log
// already) and the outcomes go on. An attempt whose job was lost stores
// nothing. A batch whose handlers logged nothing sends nothing.
func (w *Worker) recordLogs(batch []pending) {
	var writes []queue.LogsWrite
	for _, p := range batch {
		if p.logs != nil {
			writes = append(writes, queue.LogsWrite{Lease: p.f.Lease, Logs: *p.logs})
		}
	}
	if len(writes) == 0 {
		return
	}
	rec, ok := w.backend.(queue.LogRecorder)
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), w.cfg.Lease)
	defer cancel()
	stale, err := rec.RecordLogs(ctx, writes, w.cfg.AttemptLogs.Attempts)
	if err != nil {
		w.log.Warn("jobfence: storing the attempts' logs failed (they are in this log)", "jobs", len(writes), "err", err)
		return
	}
	for _, l := range stale {
		w.log.Debug("jobfence: an attempt's logs were not stored: the job was lost (they are in this log)", "job", l.ID, "fence", l.Fence)
	}
}
