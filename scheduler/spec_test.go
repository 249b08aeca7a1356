package scheduler

import (
	"errors"
	"testing"
	"time"
)

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSpecNext(t *testing.T) {
	tests := []struct {
		name     string
		spec     string
		timeZone string
		from     string
		want     []string // the next fires, in UTC
	}{
		{"five fields", "*/15 * * * *", "", "2026-05-04T10:07:13Z",
			[]string{"2026-05-04T10:15:00Z", "2026-05-04T10:30:00Z", "2026-05-04T10:45:00Z"}},
		{"seconds field", "30 * * * * *", "", "2026-05-04T10:07:13Z",
			[]string{"2026-05-04T10:07:30Z", "2026-05-04T10:08:30Z"}},
		{"every second", "* * * * * *", "", "2026-05-04T10:07:13.999Z",
			[]string{"2026-05-04T10:07:14Z", "2026-05-04T10:07:15Z"}},
		{"hourly", "@hourly", "", "2026-05-04T10:07:13Z",
			[]string{"2026-05-04T11:00:00Z", "2026-05-04T12:00:00Z"}},
		{"daily in UTC by default", "@daily", "", "2026-05-04T10:07:13Z",
			[]string{"2026-05-05T00:00:00Z", "2026-05-06T00:00:00Z"}},
		{"every 90s anchored to the epoch", "@every 90s", "", "1970-01-01T00:16:40Z",
			[]string{"1970-01-01T00:18:00Z", "1970-01-01T00:19:30Z", "1970-01-01T00:21:00Z"}},
		{"every 90s from another instant of the same interval", "@every 90s", "", "1970-01-01T00:17:59.5Z",
			[]string{"1970-01-01T00:18:00Z", "1970-01-01T00:19:30Z"}},
		{"every 1500ms rounds down to 1s", "@every 1500ms", "", "2026-05-04T10:07:13.2Z",
			[]string{"2026-05-04T10:07:14Z", "2026-05-04T10:07:15Z"}},
		{"every hour is on the hour", "@every 1h", "", "2026-05-04T10:07:13Z",
			[]string{"2026-05-04T11:00:00Z", "2026-05-04T12:00:00Z"}},
		{"CRON_TZ in summer", "CRON_TZ=America/New_York 0 9 * * *", "", "2026-07-01T00:00:00Z",
			[]string{"2026-07-01T13:00:00Z", "2026-07-02T13:00:00Z"}},
		{"CRON_TZ in winter", "CRON_TZ=America/New_York 0 9 * * *", "", "2026-01-01T00:00:00Z",
			[]string{"2026-01-01T14:00:00Z"}},
		{"TZ prefix", "TZ=Asia/Tokyo 0 6 * * *", "", "2026-05-04T00:00:00Z",
			[]string{"2026-05-04T21:00:00Z"}},
		{"TimeZone option", "0 6 * * *", "Asia/Tokyo", "2026-05-04T00:00:00Z",
			[]string{"2026-05-04T21:00:00Z"}},
		{"prefix equal to the option", "CRON_TZ=Asia/Tokyo 0 6 * * *", "Asia/Tokyo", "2026-05-04T00:00:00Z",
			[]string{"2026-05-04T21:00:00Z"}},
		{"descriptor with CRON_TZ", "CRON_TZ=Europe/Paris @daily", "", "2026-05-04T00:00:00Z",
			[]string{"2026-05-04T22:00:00Z"}},
		// A daily fire inside the hour skipped in spring fires when the
		// clock jumps (03:00 EDT), once; one inside the hour repeated in
		// autumn fires at its first occurrence only. TestSpecNextDST has
		// more.
		{"DST spring forward fires 02:30 at 03:00", "CRON_TZ=America/New_York 30 2 * * *", "", "2026-03-07T12:00:00Z",
			[]string{"2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z", "2026-03-10T06:30:00Z"}},
		{"DST spring forward hourly", "CRON_TZ=America/New_York 0 * * * *", "", "2026-03-08T05:00:00Z",
			[]string{"2026-03-08T06:00:00Z", "2026-03-08T07:00:00Z", "2026-03-08T08:00:00Z"}},
		{"DST fall back fires 01:30 once", "CRON_TZ=America/New_York 30 1 * * *", "", "2026-10-31T12:00:00Z",
			[]string{"2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sp, err := ParseSpec(tt.spec, tt.timeZone)
			if err != nil {
				t.Fatalf("ParseSpec(%q, %q): %v", tt.spec, tt.timeZone, err)
			}
			at := mustTime(t, tt.from)
			for i, w := range tt.want {
				at = sp.Next(at)
				if want := mustTime(t, w); !at.Equal(want) || at.Location() != time.UTC {
					t.Fatalf("fire %d = %v, want %v (UTC)", i, at, want)
				}
			}
		})
	}
}

// TestSpecNextIgnoresReadingInstant shows why skewed hosts agree: every
// instant before a fire, however far from it, leads to that fire.
func TestSpecNextIgnoresReadingInstant(t *testing.T) {
	for _, spec := range []string{"* * * * * *", "*/5 * * * * *", "@every 7s", "@every 90s", "@hourly"} {
		sp, err := ParseSpec(spec, "")
		if err != nil {
			t.Fatal(err)
		}
		start := mustTime(t, "2026-05-04T10:07:13Z")
		fire := sp.Next(start)
		for at := start; at.Before(fire); at = at.Add(173 * time.Millisecond) {
			if got := sp.Next(at); !got.Equal(fire) {
				t.Fatalf("%s: Next(%v) = %v, want %v", spec, at, got, fire)
			}
		}
		if got := sp.Next(fire); !got.After(fire) {
			t.Fatalf("%s: Next(fire %v) = %v, want a later fire", spec, fire, got)
		}
	}
}

func TestParseSpecErrors(t *testing.T) {
	tests := []struct {
		spec, timeZone string
		is             error
		want           string
	}{
		{"61 * * * *", "", ErrInvalidSpec, "invalid cron spec: end of range (61) above maximum (59): 61"},
		{"* * *", "", ErrInvalidSpec, "invalid cron spec: expected 5 to 6 fields, found 3: [* * *]"},
		{"@every x", "", ErrInvalidSpec, `invalid cron spec: failed to parse duration @every x: time: invalid duration "x"`},
		{"@bogus", "", ErrInvalidSpec, "invalid cron spec: unrecognized descriptor: @bogus"},
		{"", "", ErrInvalidSpec, "invalid cron spec: empty spec string"},
		{"CRON_TZ=UTC", "", ErrInvalidSpec, "invalid cron spec: no schedule after CRON_TZ=UTC"},
		{"CRON_TZ= * * * * *", "", ErrInvalidSpec, "invalid cron spec: empty time zone after CRON_TZ="},
		{"CRON_TZ=Asia/Tokyo * * * * *", "Europe/Paris", ErrInvalidSpec,
			"invalid cron spec: the spec names time zone Asia/Tokyo but Options.TimeZone is Europe/Paris"},
		{"CRON_TZ=Mars/Olympus * * * * *", "", ErrUnknownTimeZone, `unknown time zone "Mars/Olympus"`},
		{"* * * * *", "Mars/Olympus", ErrUnknownTimeZone, `unknown time zone "Mars/Olympus"`},
		{"* * * * *", "Local", ErrUnknownTimeZone,
			"unknown time zone: Local is a different zone on each host; name an IANA zone such as Europe/Paris"},
	}
	for _, tt := range tests {
		_, err := ParseSpec(tt.spec, tt.timeZone)
		if !errors.Is(err, tt.is) || err.Error() != tt.want {
			t.Errorf("ParseSpec(%q, %q) = %v, want %q (wrapping %v)", tt.spec, tt.timeZone, err, tt.want, tt.is)
		}
	}
}
