package idempotency

import "log/slog"

const (
	slogDebug = slog.LevelDebug
	slogInfo  = slog.LevelInfo
	slogWarn  = slog.LevelWarn
)

func attrScope(s string) slog.Attr { return slog.String("scope", s) }
func attrKey(k string) slog.Attr   { return slog.String("key", k) }
func attrFence(f int64) slog.Attr  { return slog.Int64("fence", f) }
func attrErr(err error) slog.Attr  { return slog.String("error", err.Error()) }
