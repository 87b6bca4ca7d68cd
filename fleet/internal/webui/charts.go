package webui

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/runfleet/runfleet/job"
)

// The overview's charts are SVG drawn by the server: no script builds them, and every figure a
// chart shows is also in its accessible text and in the tables beside it.
const (
	chartMinutes = 60 // a chart's bars: one a minute, the last one the minute under way
	// chartRows bounds the queue rows charted besides the whole view: each is 8 statuses × 60
	// minutes of counts the first time it is drawn.
	chartRows = 20
	// chartSettle is how long after a minute ends its count is final: a settlement is indexed
	// just after it is stored. A minute younger than this is counted again on every refresh.
	chartSettle = 2 * time.Minute
	// chartRecount is how long a final minute's count is kept before it is counted again, so that
	// a row indexed late (a settlement adopted after its worker died) shows within it.
	chartRecount = 10 * time.Minute
)

// chartView is what a chart counts: a queue and a tenant, each empty for every one.
type chartView struct{ Queue, Tenant string }

// minuteCount is one view's settled jobs of one minute, by job.Statuses.
type minuteCount struct {
	counted time.Time
	counts  []int64
}

// chartCache keeps the counts of minutes that are final, so that a refresh of the overview asks
// the job index only for the minutes still filling (8 counts each), not the whole hour.
type chartCache struct {
	mu      sync.Mutex
	minutes map[chartView]map[int64]minuteCount // by the minute's Unix time
}

// perMinute returns each view's settled jobs per status for each of the chartMinutes minutes up
// to now's, oldest first, counting what the cache does not hold in as few requests as it can.
func (u *UI) perMinute(ctx context.Context, views []chartView, now time.Time) ([][][]int64, error) {
	c := &u.chart
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.minutes == nil {
		c.minutes = map[chartView]map[int64]minuteCount{}
	}
	first := now.Truncate(time.Minute).Add(-(chartMinutes - 1) * time.Minute)
	type slot struct{ view, minute int }
	var (
		queries []job.ListQuery
		slots   []slot
	)
	out := make([][][]int64, len(views))
	for v, view := range views {
		out[v] = make([][]int64, chartMinutes)
		cached := c.minutes[view]
		for m := range chartMinutes {
			at := first.Add(time.Duration(m) * time.Minute)
			if mc, ok := cached[at.Unix()]; ok && now.Sub(mc.counted) < chartRecount {
				out[v][m] = mc.counts
				continue
			}
			slots = append(slots, slot{v, m})
			for _, st := range job.Statuses {
				queries = append(queries, job.ListQuery{Status: st, Queue: view.Queue, Tenant: view.Tenant,
					Since: at, Until: at.Add(time.Minute)})
			}
		}
	}
	counts, err := u.counts(ctx, queries)
	if err != nil {
		return nil, err
	}
	per := len(job.Statuses)
	for i, s := range slots {
		out[s.view][s.minute] = counts[i*per : (i+1)*per]
	}
	// Keep the minutes counted now that are final; forget those out of the hour or due for a
	// recount, so that the cache holds the views drawn within chartRecount only.
	for v, view := range views {
		for i, counts := range out[v] {
			at := first.Add(time.Duration(i) * time.Minute)
			if mc, ok := c.minutes[view][at.Unix()]; ok && now.Sub(mc.counted) < chartRecount || now.Sub(at.Add(time.Minute)) < chartSettle {
				continue
			}
			if c.minutes[view] == nil {
				c.minutes[view] = map[int64]minuteCount{}
			}
			c.minutes[view][at.Unix()] = minuteCount{counted: now, counts: counts}
		}
	}
	for view, minutes := range c.minutes {
		for at, mc := range minutes {
			if at < first.Unix() || now.Sub(mc.counted) >= chartRecount {
				delete(minutes, at)
			}
		}
		if len(minutes) == 0 {
			delete(c.minutes, view)
		}
	}
	return out, nil
}

// Geometry of the charts, in SVG user units.
const (
	bigBarW, bigBarGap, bigH     = 11.0, 2.0, 140.0
	smallBarW, smallBarGap, smlH = 3.0, 1.0, 28.0
	hBarH, hBarGap, hHeadH       = 16.0, 6.0, 22.0
	hLabelW, hColumnW, hBarMaxW  = 200.0, 360.0, 280.0 // a column holds its bar and the figure after it
)

// jobsChart is one view's settled jobs per minute over the last hour: a bar a minute, stacked by
// status.
type jobsChart struct {
	ID, Title     string
	Small         bool
	Width, Height float64
	Minutes       []minuteBar
	Max           int64 // the tallest minute's jobs
	Total         int64
	Totals        []statusCount // the hour's jobs by status, those with any
	From, To      string        // the first and last minute, UTC
	Ticks         []tick        // the big chart's time axis, under the bars
	AxisY         float64       // where the ticks' labels sit
}

// tick labels a minute on a chart's time axis.
type tick struct {
	X      float64
	Label  string
	Anchor string // SVG's text-anchor: start, or end for the last
}

type minuteBar struct {
	X, W  float64
	H     float64 // the bars' area's height
	Label string  // "12:03 UTC: 3 succeeded, 1 failed"
	Segs  []barSeg
}

type barSeg struct {
	Status     job.Status
	Count      int64
	X, Y, W, H float64
}

// newJobsChart draws counts (chartMinutes minutes, oldest first, by job.Statuses).
func newJobsChart(id, title string, small bool, first time.Time, counts [][]int64) jobsChart {
	barW, gap, h := bigBarW, bigBarGap, bigH
	if small {
		barW, gap, h = smallBarW, smallBarGap, smlH
	}
	ch := jobsChart{ID: id, Title: title, Small: small, Width: float64(len(counts)) * (barW + gap), Height: h,
		From: first.UTC().Format("15:04"), To: first.Add(time.Duration(len(counts)-1) * time.Minute).UTC().Format("15:04")}
	byStatus := make([]int64, len(job.Statuses))
	for _, c := range counts {
		var sum int64
		for i, n := range c {
			sum += n
			byStatus[i] += n
		}
		ch.Max = max(ch.Max, sum)
		ch.Total += sum
	}
	for i, st := range job.Statuses {
		if byStatus[i] > 0 {
			ch.Totals = append(ch.Totals, statusCount{st, byStatus[i]})
		}
	}
	scale := 0.0
	if ch.Max > 0 {
		scale = h / float64(ch.Max)
	}
	if !small {
		// The axis's labels sit under the bars, every quarter of an hour and at the last minute.
		ch.AxisY, ch.Height = h+14, h+18
		for m := 0; m < len(counts); m += 15 {
			ch.Ticks = append(ch.Ticks, tick{X: float64(m) * (barW + gap), Label: first.Add(time.Duration(m) * time.Minute).UTC().Format("15:04"), Anchor: "start"})
		}
		ch.Ticks = append(ch.Ticks, tick{X: ch.Width, Label: "now", Anchor: "end"})
	}
	for m, c := range counts {
		at := first.Add(time.Duration(m) * time.Minute)
		bar := minuteBar{X: float64(m) * (barW + gap), W: barW, H: h}
		var parts []string
		y := h
		for i, n := range c {
			if n == 0 {
				continue
			}
			segH := float64(n) * scale
			y -= segH
			bar.Segs = append(bar.Segs, barSeg{Status: job.Statuses[i], Count: n, X: bar.X, Y: y, W: barW, H: segH})
			parts = append(parts, strconv.FormatInt(n, 10)+" "+string(job.Statuses[i]))
		}
		if len(parts) == 0 {
			parts = []string{"none settled"}
		}
		bar.Label = at.UTC().Format("15:04") + " UTC: " + strings.Join(parts, ", ")
		ch.Minutes = append(ch.Minutes, bar)
	}
	return ch
}

// backlogChart is each row's jobs waiting and running, and its oldest wait, now: the fleet keeps
// no history of them, so these are the current values as bars, refreshed with the overview.
type backlogChart struct {
	Width, Height   float64
	JobsX, WaitX    float64 // where each column's bars start
	Rows            []backlogBar
	MaxJobs         uint64
	MaxWait, Hidden string // the longest wait; how many rows are not drawn ("" when none)
}

type backlogBar struct {
	Label                string // "queue · tenant"
	Y, TextY             float64
	Waiting, Running     uint64
	WaitingW, RunningW   float64
	RunningX, JobsTextX  float64
	Oldest               string // "" when nothing waits
	OldestW, OldestTextX float64
}

// newBacklogChart draws rows' backlog now, up to chartRows of them.
func newBacklogChart(rows []queueRow) backlogChart {
	ch := backlogChart{JobsX: hLabelW, WaitX: hLabelW + hColumnW, Width: hLabelW + 2*hColumnW}
	if len(rows) > chartRows {
		ch.Hidden = strconv.Itoa(len(rows) - chartRows)
		rows = rows[:chartRows]
	}
	var maxWait time.Duration
	waits := make([]time.Duration, len(rows))
	for i, r := range rows {
		ch.MaxJobs = max(ch.MaxJobs, r.Waiting+r.Running)
		// The row carries the wait as it prints; it prints as a Go duration, so it parses back.
		if d, err := time.ParseDuration(r.OldestWait); err == nil {
			waits[i] = d
			maxWait = max(maxWait, d)
		}
	}
	if maxWait > 0 {
		ch.MaxWait = maxWait.String()
	}
	for i, r := range rows {
		y := hHeadH + float64(i)*(hBarH+hBarGap)
		b := backlogBar{Label: r.Queue + " · " + r.Tenant, Y: y, TextY: y + hBarH - 4,
			Waiting: r.Waiting, Running: r.Running, Oldest: r.OldestWait}
		if ch.MaxJobs > 0 {
			b.WaitingW = float64(r.Waiting) / float64(ch.MaxJobs) * hBarMaxW
			b.RunningW = float64(r.Running) / float64(ch.MaxJobs) * hBarMaxW
		}
		if maxWait > 0 {
			b.OldestW = float64(waits[i]) / float64(maxWait) * hBarMaxW
		}
		b.RunningX = ch.JobsX + b.WaitingW
		b.JobsTextX = b.RunningX + b.RunningW + 6
		b.OldestTextX = ch.WaitX + b.OldestW + 6
		ch.Rows = append(ch.Rows, b)
	}
	ch.Height = hHeadH + float64(len(ch.Rows))*(hBarH+hBarGap)
	return ch
}

// overviewCharts are the overview's charts: the whole view's jobs per minute, each of the first
// chartRows rows' (in the order of rows), and the rows' backlog now.
type overviewCharts struct {
	Jobs    jobsChart
	Rows    []jobsChart
	Backlog backlogChart
}

// chartsOf draws the overview's charts of tenant's view (every tenant's when empty).
func (u *UI) chartsOf(ctx context.Context, tenant string, rows []queueRow) (overviewCharts, error) {
	now := time.Now()
	charted := rows[:min(len(rows), chartRows)]
	views := []chartView{{Tenant: tenant}}
	for _, r := range charted {
		views = append(views, chartView{Queue: r.Queue, Tenant: r.Tenant})
	}
	counts, err := u.perMinute(ctx, views, now)
	if err != nil {
		return overviewCharts{Backlog: newBacklogChart(rows)}, fmt.Errorf("jobs per minute: %w", err)
	}
	first := now.Truncate(time.Minute).Add(-(chartMinutes - 1) * time.Minute)
	title := "all queues and tenants"
	if tenant != "" {
		title = "all queues of tenant " + tenant
	}
	out := overviewCharts{Jobs: newJobsChart("jobs-all", title, false, first, counts[0]), Backlog: newBacklogChart(rows)}
	for i, r := range charted {
		out.Rows = append(out.Rows, newJobsChart(fmt.Sprintf("jobs-row-%d", i), r.Queue+" · "+r.Tenant, true, first, counts[i+1]))
	}
	return out, nil
}
