package dashboard

import (
	"net/http"
	"net/url"
	"time"

	"github.com/jobfence/jobfence/queue/pgqueue"
)

// chartRange is a span the charts show, by its name in the range
// parameter, in steps that keep each chart to a few hundred points.
type chartRange struct {
	Name       string
	Span, Step time.Duration
	// StepName says what one point sums, for the charts' units.
	StepName string
}

// chartRanges are the spans the charts offer; the first is the default.
func chartRanges() []chartRange {
	return []chartRange{
		{Name: "1h", Span: time.Hour, Step: time.Minute, StepName: "minute"},
		{Name: "24h", Span: 24 * time.Hour, Step: 10 * time.Minute, StepName: "10 minutes"},
	}
}

// chartsView is what the "charts" template shows: the filter (range,
// queue, kind) and the three charts.
type chartsView struct {
	// Action is the page's path, for the filter's form and links.
	Action string
	Range  string
	Ranges []rangeLink
	// Queue and Kind are the filter; FixedQueue is set on a queue's own
	// page, whose queue the filter does not change.
	Queue, Kind string
	FixedQueue  bool
	// Queues and Kinds are the choices: those that counted something in
	// the range (and the chosen one, even if it did not).
	Queues, Kinds     []string
	Jobs, Depth, Wait chart
	// Rows are the figures of each step, newest first, for the table
	// under the charts (what the keyboard and a screen reader read).
	Rows []chartRow
}

// rangeLink is a link to the same charts over another span.
type rangeLink struct {
	Name, Href string
	Current    bool
}

// chartRow is one step's figures.
type chartRow struct {
	At                                              string
	Enqueued, Completed, Failed, Retried, Discarded int64
	Available, Scheduled, Limited                   string
	WaitP50, WaitP99                                string
}

// readCharts reads the charts of the request's range, queue and kind
// (query parameters range, queue and kind; on a queue's page, queue is
// fixedQueue), for the page at path. An unknown range is a bad request
// that names the ranges there are.
func (h *handler) readCharts(r *http.Request, path, fixedQueue string) (chartsView, error) {
	q := r.URL.Query()
	ranges := chartRanges()
	rg := ranges[0]
	if name := q.Get("range"); name != "" {
		found := false
		for _, c := range ranges {
			if c.Name == name {
				rg, found = c, true
			}
		}
		if !found {
			return chartsView{}, badRequest("unknown range %q: the charts show 1h or 24h", name)
		}
	}
	v := chartsView{Action: h.opts.BasePath + path, Range: rg.Name, Queue: q.Get("queue"), Kind: q.Get("kind")}
	if fixedQueue != "" {
		v.Queue, v.FixedQueue = fixedQueue, true
	}
	s, err := h.client.Series(r.Context(), pgqueue.SeriesParams{Span: rg.Span, Step: rg.Step, Queue: v.Queue, Kind: v.Kind})
	if err != nil {
		return chartsView{}, err
	}
	v.Queues, v.Kinds = withChosen(s.Queues, v.Queue), withChosen(s.Kinds, v.Kind)
	for _, c := range ranges {
		link := url.Values{"range": {c.Name}}
		if v.Queue != "" && !v.FixedQueue {
			link.Set("queue", v.Queue)
		}
		if v.Kind != "" {
			link.Set("kind", v.Kind)
		}
		v.Ranges = append(v.Ranges, rangeLink{Name: c.Name, Href: v.Action + "?" + link.Encode() + "#charts", Current: c == rg})
	}
	n := len(s.Points)
	times := make([]time.Time, n)
	var enq, com, fai, ret, dis, av, sc, li, p50, p99 []float64
	for i, p := range s.Points {
		times[i] = p.At
		enq, com = append(enq, float64(p.Enqueued)), append(com, float64(p.Completed))
		fai, ret, dis = append(fai, float64(p.Failed)), append(ret, float64(p.Retried)), append(dis, float64(p.Discarded))
		av, sc, li = append(av, float64(p.Available)), append(sc, float64(p.Scheduled)), append(li, float64(p.Limited))
		p50, p99 = append(p50, float64(p.WaitP50)/float64(time.Millisecond)), append(p99, float64(p.WaitP99)/float64(time.Millisecond))
	}
	per := "jobs per " + rg.StepName
	v.Jobs = newChart("chart-jobs", "Jobs", per, times, rg.Step, []series{
		{"enqueued", "s-enqueued", enq}, {"completed", "s-completed", com}, {"failed", "s-failed", fai},
		{"retried", "s-retried", ret}, {"discarded", "s-discarded", dis},
	}, formatCount)
	depthUnit := "jobs waiting, sampled once a minute"
	if rg.Step > time.Minute {
		depthUnit = "jobs waiting, the largest sample in each " + rg.StepName
	}
	v.Depth = newChart("chart-depth", "Queue depth", depthUnit, times, rg.Step, []series{
		{"available", "s-available", av}, {"scheduled", "s-scheduled", sc}, {"limited", "s-limited", li},
	}, formatCount)
	v.Wait = newChart("chart-wait", "Enqueue to start", "wait from ready to the attempt's start", times, rg.Step, []series{
		{"p50", "s-p50", p50}, {"p99", "s-p99", p99},
	}, formatMillis)
	for i := n - 1; i >= 0; i-- {
		p := s.Points[i]
		row := chartRow{At: p.At.UTC().Format("2006-01-02 15:04"), Enqueued: p.Enqueued, Completed: p.Completed,
			Failed: p.Failed, Retried: p.Retried, Discarded: p.Discarded,
			Available: "-", Scheduled: "-", Limited: "-", WaitP50: "-", WaitP99: "-"}
		if p.Sampled {
			row.Available, row.Scheduled, row.Limited = groupThousands(p.Available), groupThousands(p.Scheduled), groupThousands(p.Limited)
		}
		if p.Started > 0 {
			row.WaitP50, row.WaitP99 = roundDuration(p.WaitP50), roundDuration(p.WaitP99)
		}
		v.Rows = append(v.Rows, row)
	}
	return v, nil
}

// withChosen is names with chosen among them (a filter keeps its choice
// even when nothing of it counted in the range).
func withChosen(names []string, chosen string) []string {
	if chosen == "" {
		return names
	}
	for _, n := range names {
		if n == chosen {
			return names
		}
	}
	return append([]string{chosen}, names...)
}
