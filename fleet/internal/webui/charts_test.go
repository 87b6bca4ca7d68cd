package webui

import (
	"math"
	"testing"
	"time"

	"github.com/runfleet/runfleet/job"
)

func TestJobsChart(t *testing.T) {
	first := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	counts := make([][]int64, chartMinutes)
	for i := range counts {
		counts[i] = make([]int64, len(job.Statuses))
	}
	counts[3][0], counts[3][1] = 3, 1 // 10:03: 3 succeeded, 1 failed
	counts[59][0] = 2
	for _, small := range []bool{false, true} {
		ch := newJobsChart("c", "all", small, first, counts)
		if len(ch.Minutes) != chartMinutes {
			t.Fatalf("small=%v: %d minutes, want %d", small, len(ch.Minutes), chartMinutes)
		}
		if ch.Max != 4 || ch.Total != 6 {
			t.Errorf("small=%v: Max, Total = %d, %d, want 4, 6", small, ch.Max, ch.Total)
		}
		if got := ch.Minutes[3].Label; got != "10:03 UTC: 3 succeeded, 1 failed" {
			t.Errorf("small=%v: label = %q", small, got)
		}
		if got := ch.Minutes[0].Label; got != "10:00 UTC: none settled" {
			t.Errorf("small=%v: label of an empty minute = %q", small, got)
		}
		var h float64
		for _, s := range ch.Minutes[3].Segs {
			h += s.H
		}
		if area := ch.Minutes[3].H; math.Abs(h-area) > 1e-9 || ch.Minutes[3].Segs[1].Y != 0 {
			t.Errorf("small=%v: the tallest bar is %v high, top at %v, want the chart's %v, from 0", small, h, ch.Minutes[3].Segs[1].Y, area)
		}
		if got := len(ch.Minutes[59].Segs); got != 1 {
			t.Errorf("small=%v: %d segments in the last minute, want 1", small, got)
		}
		if !small && (len(ch.Ticks) != 5 || ch.Ticks[0].Label != "10:00" || ch.Ticks[4].Label != "now") {
			t.Errorf("ticks = %+v, want 10:00 to now", ch.Ticks)
		}
	}
}

func TestBacklogChart(t *testing.T) {
	rows := []queueRow{
		{Queue: "q", Tenant: "a", Waiting: 6, Running: 2, OldestWait: "1m0s"},
		{Queue: "q", Tenant: "b", Waiting: 0, Running: 4},
		{Queue: "r", Tenant: "a", Waiting: 1, OldestWait: "30s"},
	}
	ch := newBacklogChart(rows)
	if len(ch.Rows) != 3 || ch.MaxJobs != 8 || ch.MaxWait != "1m0s" || ch.Hidden != "" {
		t.Fatalf("chart = %+v", ch)
	}
	if got := ch.Rows[0].WaitingW + ch.Rows[0].RunningW; got != hBarMaxW {
		t.Errorf("the longest row is %v wide, want %v", got, hBarMaxW)
	}
	if got := ch.Rows[2].OldestW; got != hBarMaxW/2 {
		t.Errorf("half the longest wait is %v wide, want %v", got, hBarMaxW/2)
	}
	if ch.Rows[1].OldestW != 0 || ch.Rows[1].Oldest != "" {
		t.Errorf("a row where nothing waits has a wait: %+v", ch.Rows[1])
	}
	many := make([]queueRow, chartRows+3)
	if ch := newBacklogChart(many); len(ch.Rows) != chartRows || ch.Hidden != "3" {
		t.Errorf("%d rows: %d drawn, %q hidden, want %d and 3", len(many), len(ch.Rows), ch.Hidden, chartRows)
	}
}
