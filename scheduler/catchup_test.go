package scheduler

import (
	"slices"
	"testing"
	"time"
)

func TestCatchUpDue(t *testing.T) {
	// A per-second schedule whose last handled fire is base; base+1s ... are
	// the fires after it.
	base := mustTime(t, "2026-05-04T10:00:00Z")
	sec := func(n int) time.Time { return base.Add(time.Duration(n) * time.Second) }
	tests := []struct {
		name   string
		policy CatchUpPolicy
		grace  time.Duration
		window time.Duration
		cursor time.Time
		now    time.Time
		want   []int  // seconds after base
		spec   string // default: every second
		busy   time.Time
		missed []int // dropped fires inside the window, seconds after base
		older  int   // the first fire dropped as older than the window; 0 if none
	}{
		{"on time", CatchUpSkip, time.Second, time.Minute, sec(0), sec(1).Add(20 * time.Millisecond), []int{1}, "", time.Time{}, nil, 0},
		{"nothing due", CatchUpSkip, time.Second, time.Minute, sec(1), sec(1).Add(900 * time.Millisecond), nil, "", time.Time{}, nil, 0},
		{"late within grace", CatchUpSkip, 10 * time.Second, time.Minute, sec(0), sec(3).Add(500 * time.Millisecond), []int{1, 2, 3}, "", time.Time{}, nil, 0},
		{"skip drops missed fires", CatchUpSkip, 500 * time.Millisecond, time.Minute, sec(0), sec(5).Add(700 * time.Millisecond), nil, "", time.Time{}, []int{1, 2, 3, 4, 5}, 0},
		{"skip keeps fires within grace", CatchUpSkip, 2 * time.Second, time.Minute, sec(0), sec(5).Add(700 * time.Millisecond), []int{4, 5}, "", time.Time{}, []int{1, 2, 3}, 0},
		{"latest", CatchUpLatest, 500 * time.Millisecond, time.Minute, sec(0), sec(5).Add(700 * time.Millisecond), []int{5}, "", time.Time{}, []int{1, 2, 3, 4}, 0},
		{"latest plus fires within grace", CatchUpLatest, 2 * time.Second, time.Minute, sec(0), sec(5).Add(700 * time.Millisecond), []int{3, 4, 5}, "", time.Time{}, []int{1, 2}, 0},
		{"latest outside the window", CatchUpLatest, 500 * time.Millisecond, 3 * time.Second, sec(0), sec(25).Add(700 * time.Millisecond), nil, "*/10 * * * * *", time.Time{}, nil, 10},
		{"latest inside the window", CatchUpLatest, 500 * time.Millisecond, 10 * time.Second, sec(0), sec(25).Add(700 * time.Millisecond), []int{20}, "*/10 * * * * *", time.Time{}, nil, 10},
		{"all", CatchUpAll, 500 * time.Millisecond, time.Minute, sec(0), sec(5).Add(700 * time.Millisecond), []int{1, 2, 3, 4, 5}, "", time.Time{}, nil, 0},
		{"all inside the window", CatchUpAll, 500 * time.Millisecond, 3500 * time.Millisecond, sec(0), sec(5).Add(700 * time.Millisecond), []int{3, 4, 5}, "", time.Time{}, nil, 1},
		{"all with window shorter than grace", CatchUpAll, 3 * time.Second, time.Second, sec(0), sec(5).Add(700 * time.Millisecond), []int{3, 4, 5}, "", time.Time{}, nil, 1},
		{"cursor ahead of the clock", CatchUpAll, time.Second, time.Minute, sec(5), sec(3), nil, "", time.Time{}, nil, 0},
		{"fires while busy are on time", CatchUpSkip, 500 * time.Millisecond, time.Minute, sec(0), sec(5).Add(700 * time.Millisecond), []int{1, 2, 3, 4, 5}, "", sec(5).Add(500 * time.Millisecond), nil, 0},
		{"fires after busy are missed", CatchUpSkip, 500 * time.Millisecond, time.Minute, sec(0), sec(5).Add(700 * time.Millisecond), []int{1, 2}, "", sec(2).Add(500 * time.Millisecond), []int{3, 4, 5}, 0},
		{"busy after now", CatchUpSkip, 500 * time.Millisecond, time.Minute, sec(0), sec(5).Add(700 * time.Millisecond), []int{1, 2, 3, 4, 5}, "", sec(9), nil, 0},
		{"busy before the cursor", CatchUpSkip, 500 * time.Millisecond, time.Minute, sec(3), sec(5).Add(700 * time.Millisecond), nil, "", sec(2), []int{4, 5}, 0},
		{"latest after busy", CatchUpLatest, 500 * time.Millisecond, time.Minute, sec(0), sec(5).Add(700 * time.Millisecond), []int{1, 5}, "", sec(1).Add(500 * time.Millisecond), []int{2, 3, 4}, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.spec == "" {
				tt.spec = "* * * * * *"
			}
			sp, err := ParseSpec(tt.spec, "")
			if err != nil {
				t.Fatal(err)
			}
			c := catchUp{policy: tt.policy, grace: tt.grace, window: tt.window}
			var got []int
			fires, m := c.due(sp, tt.cursor, tt.busy, tt.now)
			for _, f := range fires {
				got = append(got, int(f.Sub(base)/time.Second))
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("due = %v, want %v", got, tt.want)
			}
			var wantMissed missed
			for _, n := range tt.missed {
				wantMissed.add(sec(n))
			}
			if tt.older != 0 {
				wantMissed.beforeWindow = sec(tt.older)
				wantMissed.windowEnd = earlier(later(tt.cursor, tt.now.Add(-tt.window)), tt.now.Add(-tt.grace))
			}
			if m != wantMissed {
				t.Fatalf("missed = %+v, want %+v", m, wantMissed)
			}
		})
	}
}

func TestCatchUpPolicyString(t *testing.T) {
	for p, want := range map[CatchUpPolicy]string{CatchUpSkip: "skip", CatchUpLatest: "latest", CatchUpAll: "all", 7: "CatchUpPolicy(7)"} {
		if got := p.String(); got != want {
			t.Errorf("%d.String() = %q, want %q", int(p), got, want)
		}
	}
}
