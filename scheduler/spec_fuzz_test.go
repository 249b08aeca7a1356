package scheduler_test

import (
	"errors"
	"testing"
	"time"

	"github.com/jobfence/jobfence/scheduler"
)

// FuzzParseSpec: any spec and zone either parse or fail with one of the
// package's errors, and a parsed spec's fires come after the instant asked
// from, in UTC, in order, the same whatever zone the asking host is in, and
// the same from any instant before them (so catch-up, which asks from just
// before a fire, finds that fire).
func FuzzParseSpec(f *testing.F) {
	for _, s := range []string{"0 3 * * *", "*/10 * * * * *", "@hourly", "@every 90s", "@every 0s", "CRON_TZ=Europe/Paris 30 2 * * *",
		"TZ= * * * * *", "0 0 30 2 *", "5-1 * * * *", "@every -1h", "* * * * * * *", "0 2 29 2 1"} {
		f.Add(s, "")
	}
	f.Add("30 2 * * *", "Europe/Paris")
	f.Add("0 1 * * 0", "America/Sao_Paulo")
	f.Add("*/20 2 * * *", "Europe/Berlin")
	f.Add("30 1 * * *", "America/New_York")
	f.Add("15 2 * * *", "Australia/Lord_Howe")
	f.Add("* * * * *", "Local")
	start := []time.Time{
		time.Date(2026, 3, 29, 0, 30, 0, 0, time.UTC),
		time.Date(2026, 10, 25, 0, 59, 59, 999, time.UTC),
		time.Date(1969, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(2026, 3, 8, 6, 59, 59, 0, time.UTC),
		time.Date(2026, 11, 1, 5, 45, 0, 0, time.UTC),
	}
	elsewhere := time.FixedZone("UTC+13:45", 13*3600+45*60)
	f.Fuzz(func(t *testing.T, spec, zone string) {
		sp, err := scheduler.ParseSpec(spec, zone)
		if err != nil {
			if !errors.Is(err, scheduler.ErrInvalidSpec) && !errors.Is(err, scheduler.ErrUnknownTimeZone) {
				t.Fatalf("ParseSpec(%q, %q) = %v, want ErrInvalidSpec or ErrUnknownTimeZone", spec, zone, err)
			}
			return
		}
		if sp.Location() == nil {
			t.Fatalf("ParseSpec(%q, %q) has no location", spec, zone)
		}
		for _, t0 := range start {
			n := sp.Next(t0)
			if n.IsZero() {
				continue
			}
			if !n.After(t0) || n.Location() != time.UTC {
				t.Fatalf("%q in %q: Next(%v) = %v, want a UTC time after it", spec, zone, t0, n)
			}
			if other := sp.Next(t0.In(elsewhere)); !other.Equal(n) {
				t.Fatalf("%q in %q: Next(%v) = %v, but asked from another zone %v", spec, zone, t0, n, other)
			}
			if back := sp.Next(n.Add(-time.Nanosecond)); !back.Equal(n) {
				t.Fatalf("%q in %q: Next(%v) = %v, but Next just before it = %v", spec, zone, t0, n, back)
			}
			if n2 := sp.Next(n); !n2.IsZero() && !n2.After(n) {
				t.Fatalf("%q in %q: Next(%v) = %v, not after it", spec, zone, n, n2)
			}
		}
	})
}
