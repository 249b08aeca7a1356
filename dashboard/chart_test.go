package dashboard

import (
	"strings"
	"testing"
	"time"
)

// TestLinePath: the path of known points over the plot (x from 56 to
// 712, y from 170 at zero up to 10 at the axis' maximum).
func TestLinePath(t *testing.T) {
	for _, tc := range []struct {
		values []float64
		yMax   float64
		want   string
	}{
		{[]float64{0, 5, 10}, 10, "M56 170 L384 90 L712 10"},
		{[]float64{4}, 8, "M56 90"},
		{[]float64{1, 0, 0, 3}, 4, "M56 130 L274.7 170 L493.3 170 L712 50"},
		{nil, 4, ""},
	} {
		if got := linePath(tc.values, tc.yMax); got != tc.want {
			t.Errorf("linePath(%v, %v) = %q, want %q", tc.values, tc.yMax, got, tc.want)
		}
	}
}

// TestNiceScale: the y axis reaches the largest value in round steps.
func TestNiceScale(t *testing.T) {
	for _, tc := range []struct {
		top, yMax, step float64
	}{
		{0, 4, 1}, {3, 4, 1}, {5, 8, 2}, {9, 10, 2.5}, {37, 40, 10}, {41, 80, 20}, {1234, 2000, 500},
	} {
		if yMax, step := niceScale(tc.top, 4); yMax != tc.yMax || step != tc.step {
			t.Errorf("niceScale(%v) = %v, %v; want %v, %v", tc.top, yMax, step, tc.yMax, tc.step)
		}
	}
}

// TestNewChart: a chart of three minutes has its lines, its y labels in
// round steps, an x label on the round ten minutes, and a column per
// minute whose tooltip names every line's value.
func TestNewChart(t *testing.T) {
	at := time.Date(2030, 1, 1, 12, 9, 0, 0, time.UTC)
	times := []time.Time{at, at.Add(time.Minute), at.Add(2 * time.Minute)}
	c := newChart("c", "Jobs", "jobs per minute", times, time.Minute, []series{
		{"completed", "s-completed", []float64{0, 5, 10}}, {"failed", "s-failed", []float64{1, 0, 2}},
	}, formatCount)
	if len(c.Lines) != 2 || c.Lines[0].Path != "M56 170 L384 90 L712 10" || c.Lines[1].Path != "M56 154 L384 170 L712 138" {
		t.Errorf("lines %+v", c.Lines)
	}
	var ys []string
	for _, tk := range c.YTicks {
		ys = append(ys, tk.Label)
	}
	if got := strings.Join(ys, " "); got != "0 2.5 5 7.5 10" {
		t.Errorf("y labels %q", got)
	}
	if len(c.XTicks) != 1 || c.XTicks[0].Label != "12:10" || c.XTicks[0].At != 384 {
		t.Errorf("x labels %+v, want 12:10 at 384", c.XTicks)
	}
	if len(c.Columns) != 3 || c.Columns[2].Title != "12:11, completed 10, failed 2" || c.Columns[0].X != 56 {
		t.Errorf("columns %+v", c.Columns)
	}
	if c.Empty {
		t.Error("a chart with values reads as empty")
	}
	if e := newChart("e", "Jobs", "", times, time.Minute, []series{{"completed", "s", []float64{0, 0, 0}}}, formatCount); !e.Empty {
		t.Error("a chart of zeros does not read as empty")
	}
}
