package scheduler

import (
	"slices"
	"testing"
	"time"
)

// dstCases are schedules around the daylight-saving transitions of 2026:
// Europe/Berlin springs forward on 29 March at 02:00 CET (01:00Z) to 03:00
// CEST and falls back on 25 October at 03:00 CEST (01:00Z) to 02:00 CET;
// America/New_York springs forward on 8 March at 02:00 EST (07:00Z) to
// 03:00 EDT and falls back on 1 November at 02:00 EDT (06:00Z) to 01:00
// EST. fires are every fire from the first to the last, in UTC.
var dstCases = []struct {
	name, spec string
	fires      []string
}{
	// A schedule that names its hours fires once per wall-clock fire: a
	// skipped time when the clock jumps past it, a repeated one at its
	// first occurrence.
	{"Berlin daily 02:30, spring: at 03:00 CEST", "CRON_TZ=Europe/Berlin 30 2 * * *",
		[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z"}},
	{"Berlin daily 02:30, autumn: at 02:30 CEST only", "CRON_TZ=Europe/Berlin 30 2 * * *",
		[]string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z"}},
	{"New York daily 02:30, spring: at 03:00 EDT", "CRON_TZ=America/New_York 30 2 * * *",
		[]string{"2026-03-07T07:30:00Z", "2026-03-08T07:00:00Z", "2026-03-09T06:30:00Z"}},
	{"New York daily 01:30, autumn: at 01:30 EDT only", "CRON_TZ=America/New_York 30 1 * * *",
		[]string{"2026-10-31T05:30:00Z", "2026-11-01T05:30:00Z", "2026-11-02T06:30:00Z"}},
	{"New York daily 02:30, autumn: not repeated", "CRON_TZ=America/New_York 30 2 * * *",
		[]string{"2026-10-31T06:30:00Z", "2026-11-01T07:30:00Z", "2026-11-02T07:30:00Z"}},
	{"Berlin daily 03:00, spring: not doubled by the jump", "CRON_TZ=Europe/Berlin 0 3 * * *",
		[]string{"2026-03-28T02:00:00Z", "2026-03-29T01:00:00Z", "2026-03-30T01:00:00Z"}},
	// Every match inside the gap is the same wall-clock fire.
	{"Berlin every 20 minutes of 02h, spring: once at 03:00", "CRON_TZ=Europe/Berlin */20 2 * * *",
		[]string{"2026-03-28T01:00:00Z", "2026-03-28T01:20:00Z", "2026-03-28T01:40:00Z",
			"2026-03-29T01:00:00Z",
			"2026-03-30T00:00:00Z"}},
	{"Berlin every 20 minutes of 02h, autumn: the first 02h only", "CRON_TZ=Europe/Berlin */20 2 * * *",
		[]string{"2026-10-25T00:00:00Z", "2026-10-25T00:20:00Z", "2026-10-25T00:40:00Z",
			"2026-10-26T01:00:00Z"}},
	{"New York 01:30 and 02:30, autumn: two hours apart", "CRON_TZ=America/New_York 30 1,2 * * *",
		[]string{"2026-11-01T05:30:00Z", "2026-11-01T07:30:00Z", "2026-11-02T06:30:00Z"}},
	// Midnight that does not exist: São Paulo sprang forward at 00:00 on
	// 4 November 2018 to 01:00 (-02), and fell back at 00:00 on 17
	// February 2019 to 23:00 (-03) of the day before, so that midnight
	// came an hour later.
	{"São Paulo @daily, spring: at 01:00", "CRON_TZ=America/Sao_Paulo @daily",
		[]string{"2018-11-03T03:00:00Z", "2018-11-04T03:00:00Z", "2018-11-05T02:00:00Z"}},
	{"São Paulo @daily, autumn: once", "CRON_TZ=America/Sao_Paulo @daily",
		[]string{"2019-02-16T02:00:00Z", "2019-02-17T03:00:00Z", "2019-02-18T03:00:00Z"}},
	// A 30-minute shift: Lord Howe Island goes from 02:00 to 02:30 on 4
	// October 2026 (+10:30 to +11).
	{"Lord Howe daily 02:15, spring: at 02:30", "CRON_TZ=Australia/Lord_Howe 15 2 * * *",
		[]string{"2026-10-02T15:45:00Z", "2026-10-03T15:30:00Z", "2026-10-04T15:15:00Z"}},

	// A schedule that runs every hour follows the clock: no fire in the
	// skipped hour, a fire in each occurrence of the repeated one, an hour
	// apart throughout.
	{"Berlin hourly :30, spring", "CRON_TZ=Europe/Berlin 30 * * * *",
		[]string{"2026-03-28T23:30:00Z", "2026-03-29T00:30:00Z", "2026-03-29T01:30:00Z", "2026-03-29T02:30:00Z"}},
	{"Berlin hourly :30, autumn: 02:30 CEST and 02:30 CET", "CRON_TZ=Europe/Berlin 30 * * * *",
		[]string{"2026-10-24T23:30:00Z", "2026-10-25T00:30:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:30:00Z"}},
	{"New York hourly :30, spring", "CRON_TZ=America/New_York 30 * * * *",
		[]string{"2026-03-08T05:30:00Z", "2026-03-08T06:30:00Z", "2026-03-08T07:30:00Z", "2026-03-08T08:30:00Z"}},
	{"New York hourly :30, autumn: 01:30 EDT and 01:30 EST", "CRON_TZ=America/New_York 30 * * * *",
		[]string{"2026-11-01T04:30:00Z", "2026-11-01T05:30:00Z", "2026-11-01T06:30:00Z", "2026-11-01T07:30:00Z"}},
	{"New York @hourly, autumn", "CRON_TZ=America/New_York @hourly",
		[]string{"2026-11-01T05:00:00Z", "2026-11-01T06:00:00Z", "2026-11-01T07:00:00Z"}},
	{"New York every 20 minutes, spring: 20 minutes apart", "CRON_TZ=America/New_York */20 * * * *",
		[]string{"2026-03-08T06:20:00Z", "2026-03-08T06:40:00Z", "2026-03-08T07:00:00Z", "2026-03-08T07:20:00Z"}},
}

// TestSpecNextDST checks every fire around a transition, asked for from
// instants all over the span (every 7m13s, and just before and at each
// fire): Next must return the first listed fire after the instant, so every
// host finds the same fires (and keys) whenever it asks.
func TestSpecNextDST(t *testing.T) {
	for _, tt := range dstCases {
		t.Run(tt.name, func(t *testing.T) {
			sp, err := ParseSpec(tt.spec, "")
			if err != nil {
				t.Fatal(err)
			}
			var fires []time.Time
			for _, f := range tt.fires {
				fires = append(fires, mustTime(t, f))
			}
			first, last := fires[0], fires[len(fires)-1]
			check := func(at time.Time) {
				t.Helper()
				i, _ := slices.BinarySearchFunc(fires, at, func(f, at time.Time) int {
					if f.After(at) {
						return 1
					}
					return -1
				})
				got := sp.Next(at)
				if !got.Equal(fires[i]) || got.Location() != time.UTC {
					t.Fatalf("Next(%v) = %v, want %v (UTC)", at.In(sp.Location()), got.In(sp.Location()), fires[i].In(sp.Location()))
				}
			}
			check(first.Add(-time.Nanosecond))
			for _, f := range fires[:len(fires)-1] {
				check(f.Add(-time.Nanosecond))
				check(f)
				check(f.Add(time.Nanosecond))
			}
			for at := first; at.Before(last); at = at.Add(7*time.Minute + 13*time.Second) {
				check(at)
			}
			// A reading in another zone changes nothing.
			check(first.In(time.FixedZone("", 5*3600+45*60)))
		})
	}
}

// TestCatchUpAcrossDST: catch-up after downtime over a transition enqueues
// the same fires, one per wall-clock fire of a daily schedule, whichever
// instant the instance restarts at.
func TestCatchUpAcrossDST(t *testing.T) {
	for _, tt := range []struct {
		spec        string
		cursor, now string
		policy      CatchUpPolicy
		want        []string
		missed      int // fires dropped inside the window
	}{
		{"CRON_TZ=Europe/Berlin 30 2 * * *", "2026-03-27T12:00:00Z", "2026-03-31T12:00:00Z", CatchUpAll,
			[]string{"2026-03-28T01:30:00Z", "2026-03-29T01:00:00Z", "2026-03-30T00:30:00Z", "2026-03-31T00:30:00Z"}, 0},
		{"CRON_TZ=Europe/Berlin 30 2 * * *", "2026-10-23T12:00:00Z", "2026-10-27T12:00:00Z", CatchUpAll,
			[]string{"2026-10-24T00:30:00Z", "2026-10-25T00:30:00Z", "2026-10-26T01:30:00Z", "2026-10-27T01:30:00Z"}, 0},
		// Down from just after the first 01:30 to the second: nothing is
		// due, the second 01:30 is the same wall-clock fire.
		{"CRON_TZ=America/New_York 30 1 * * *", "2026-11-01T05:30:00Z", "2026-11-01T06:45:00Z", CatchUpAll,
			nil, 0},
		{"CRON_TZ=America/New_York 30 2 * * *", "2026-03-08T06:00:00Z", "2026-03-08T07:30:00Z", CatchUpLatest,
			[]string{"2026-03-08T07:00:00Z"}, 0},
		{"CRON_TZ=America/New_York 30 * * * *", "2026-11-01T04:00:00Z", "2026-11-01T08:00:00Z", CatchUpLatest,
			[]string{"2026-11-01T07:30:00Z"}, 3},
	} {
		t.Run(tt.spec+" "+tt.now, func(t *testing.T) {
			sp, err := ParseSpec(tt.spec, "")
			if err != nil {
				t.Fatal(err)
			}
			c := catchUp{policy: tt.policy, grace: 10 * time.Second, window: 5 * 24 * time.Hour}
			fires, m := c.due(sp, mustTime(t, tt.cursor), time.Time{}, mustTime(t, tt.now))
			var got []string
			for _, f := range fires {
				got = append(got, f.Format(time.RFC3339))
			}
			if !slices.Equal(got, tt.want) || m.n != tt.missed || !m.beforeWindow.IsZero() {
				t.Fatalf("due = %v, missed %+v; want %v, %d missed", got, m, tt.want, tt.missed)
			}
		})
	}
}
