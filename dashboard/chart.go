package dashboard

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// The plot area of every chart, in the SVG's own units (its viewBox):
// room on the left for the y axis' labels and below for the x axis'.
const (
	chartWidth   = 720
	chartHeight  = 200
	chartLeft    = 56
	chartRight   = 712
	chartTop     = 10
	chartBottom  = 170
	chartYTicks  = 4
	chartXLabelY = 188
)

// chart is one inline SVG chart: lines over the same time steps, with
// their axes, a legend, and a column per step whose <title> is its
// tooltip (focusable, so that the keyboard reaches the figures too).
type chart struct {
	// ID names the chart's elements (its title, for aria-labelledby).
	ID, Title string
	// Unit says what the y axis counts.
	Unit  string
	Lines []chartLine
	// YTicks and XTicks are the axes' labels.
	YTicks, XTicks []chartTick
	// Columns are the steps' hover and focus areas.
	Columns []chartColumn
	// Empty reports that no line has a value above zero.
	Empty bool
	// Width, Height, Left, Right, Top and Bottom are the constants above,
	// for the template.
	Width, Height, Left, Right, Top, Bottom, XLabelY int
	// PlotHeight is Bottom - Top: the columns' height.
	PlotHeight int
}

// chartLine is one series: its name (the legend's), its CSS class (the
// colour, from style.css: inline styles are against the
// Content-Security-Policy) and its path.
type chartLine struct {
	Name, Class string
	Path        string
}

// chartTick is an axis label at a position (y for the y axis, x for the
// x axis).
type chartTick struct {
	At    float64
	Label string
}

// chartColumn is a step's area: x and width, and its tooltip.
type chartColumn struct {
	X, W  float64
	Title string
}

// series is a named line's values, one per step; format writes a value
// for the tooltip.
type series struct {
	name, class string
	values      []float64
}

// newChart lays out lines of values over the steps starting at times
// (one per value, step apart), scaling the y axis to a round maximum
// above the largest value; format writes a value for the labels and
// tooltips.
func newChart(id, title, unit string, times []time.Time, step time.Duration, lines []series, format func(float64) string) chart {
	c := chart{ID: id, Title: title, Unit: unit, Width: chartWidth, Height: chartHeight,
		Left: chartLeft, Right: chartRight, Top: chartTop, Bottom: chartBottom, XLabelY: chartXLabelY,
		PlotHeight: chartBottom - chartTop}
	top := 0.0
	for _, l := range lines {
		for _, v := range l.values {
			top = max(top, v)
		}
	}
	c.Empty = top == 0
	yMax, yStep := niceScale(top, chartYTicks)
	for i := 0; i <= chartYTicks; i++ {
		v := yStep * float64(i)
		c.YTicks = append(c.YTicks, chartTick{At: yFor(v, yMax), Label: format(v)})
	}
	for _, l := range lines {
		c.Lines = append(c.Lines, chartLine{Name: l.name, Class: l.class, Path: linePath(l.values, yMax)})
	}
	n := len(times)
	w := float64(chartRight-chartLeft) / float64(max(n-1, 1))
	every := int64(labelEvery(step, n) / time.Second)
	for i, t := range times {
		x := xFor(i, n)
		if t.Unix()%every == 0 {
			c.XTicks = append(c.XTicks, chartTick{At: x, Label: t.UTC().Format("15:04")})
		}
		var b strings.Builder
		b.WriteString(t.UTC().Format("15:04"))
		if step > time.Minute {
			b.WriteString("–" + t.Add(step).UTC().Format("15:04"))
		}
		for _, l := range lines {
			fmt.Fprintf(&b, ", %s %s", l.name, format(l.values[i]))
		}
		c.Columns = append(c.Columns, chartColumn{X: round1(max(x-w/2, chartLeft)), W: round1(min(w, x+w/2-chartLeft, chartRight-x+w/2)), Title: b.String()})
	}
	return c
}

// labelEvery is how far apart the x axis' labels are: the x axis labels
// the times that are multiples of it (round times), at most about eight
// over the n steps.
func labelEvery(step time.Duration, n int) time.Duration {
	span := step * time.Duration(n)
	for _, every := range []time.Duration{10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour,
		3 * time.Hour, 4 * time.Hour, 6 * time.Hour, 12 * time.Hour} {
		if every >= step && span/every <= 8 {
			return every
		}
	}
	return 24 * time.Hour
}

// xFor is the x of the i-th of n steps.
func xFor(i, n int) float64 {
	if n <= 1 {
		return chartLeft
	}
	return round1(chartLeft + float64(i)*float64(chartRight-chartLeft)/float64(n-1))
}

// yFor is the y of v on an axis up to yMax.
func yFor(v, yMax float64) float64 {
	return round1(chartBottom - v/yMax*float64(chartBottom-chartTop))
}

// round1 rounds to a tenth of a unit: the paths stay short, and a tenth
// of a pixel is finer than a screen shows.
func round1(v float64) float64 { return math.Round(v*10) / 10 }

// linePath is the SVG path of values over the plot, the y axis up to
// yMax: "M x0 y0 L x1 y1 ...".
func linePath(values []float64, yMax float64) string {
	var b strings.Builder
	for i, v := range values {
		if i == 0 {
			b.WriteString("M")
		} else {
			b.WriteString(" L")
		}
		b.WriteString(strconv.FormatFloat(xFor(i, len(values)), 'f', -1, 64))
		b.WriteByte(' ')
		b.WriteString(strconv.FormatFloat(yFor(v, yMax), 'f', -1, 64))
	}
	return b.String()
}

// niceScale returns a round maximum for an axis that must reach top, in
// ticks steps of a round size (1, 2, 2.5 or 5 times a power of ten; at least
// 1 per tick, so that a chart of zeros still has an axis).
func niceScale(top float64, ticks int) (yMax, step float64) {
	raw := top / float64(ticks)
	if raw <= 1 {
		return float64(ticks), 1
	}
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= raw {
			step = m * p
			break
		}
	}
	return step * float64(ticks), step
}

// formatCount writes a count for an axis or a tooltip: whole numbers
// grouped by thousands, fractions (an average) to one decimal.
func formatCount(v float64) string {
	if v != math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 1, 64)
	}
	return groupThousands(int64(v))
}

// groupThousands writes n with its digits grouped by thousands.
func groupThousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	var b strings.Builder
	for i, d := range s {
		if i > 0 && d != '-' && s[i-1] != '-' && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(d)
	}
	return b.String()
}

// formatMillis writes a wait in milliseconds as a duration.
func formatMillis(ms float64) string {
	if ms == 0 {
		return "0"
	}
	return roundDuration(time.Duration(ms * float64(time.Millisecond)))
}
