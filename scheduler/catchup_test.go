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
	}{
		{"on time", CatchUpSkip, time.Second, time.Minute, sec(0), sec(1).Add(20 * time.Millisecond), []int{1}, ""},
		{"nothing due", CatchUpSkip, time.Second, time.Minute, sec(1), sec(1).Add(900 * time.Millisecond), nil, ""},
		{"late within grace", CatchUpSkip, 10 * time.Second, time.Minute, sec(0), sec(3).Add(500 * time.Millisecond), []int{1, 2, 3}, ""},
		{"skip drops missed fires", CatchUpSkip, 500 * time.Millisecond, time.Minute, sec(0), sec(5).Add(700 * time.Millisecond), nil, ""},
		{"skip keeps fires within grace", CatchUpSkip, 2 * time.Second, time.Minute, sec(0), sec(5).Add(700 * time.Millisecond), []int{4, 5}, ""},
		{"latest", CatchUpLatest, 500 * time.Millisecond, time.Minute, sec(0), sec(5).Add(700 * time.Millisecond), []int{5}, ""},
		{"latest plus fires within grace", CatchUpLatest, 2 * time.Second, time.Minute, sec(0), sec(5).Add(700 * time.Millisecond), []int{3, 4, 5}, ""},
		{"latest outside the window", CatchUpLatest, 500 * time.Millisecond, 3 * time.Second, sec(0), sec(25).Add(700 * time.Millisecond), nil, "*/10 * * * * *"},
		{"latest inside the window", CatchUpLatest, 500 * time.Millisecond, 10 * time.Second, sec(0), sec(25).Add(700 * time.Millisecond), []int{20}, "*/10 * * * * *"},
		{"all", CatchUpAll, 500 * time.Millisecond, time.Minute, sec(0), sec(5).Add(700 * time.Millisecond), []int{1, 2, 3, 4, 5}, ""},
		{"all inside the window", CatchUpAll, 500 * time.Millisecond, 3500 * time.Millisecond, sec(0), sec(5).Add(700 * time.Millisecond), []int{3, 4, 5}, ""},
		{"all with window shorter than grace", CatchUpAll, 3 * time.Second, time.Second, sec(0), sec(5).Add(700 * time.Millisecond), []int{3, 4, 5}, ""},
		{"cursor ahead of the clock", CatchUpAll, time.Second, time.Minute, sec(5), sec(3), nil, ""},
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
			for _, f := range c.due(sp, tt.cursor, tt.now) {
				got = append(got, int(f.Sub(base)/time.Second))
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("due = %v, want %v", got, tt.want)
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
