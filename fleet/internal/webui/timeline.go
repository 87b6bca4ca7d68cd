package webui

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/runfleet/runfleet/job"
)

// timeline is a job's life as its settlement records it: queued → claimed → started → finished
// → settled, each stage's time and how long after the one before it, and its attempts.
type timeline struct {
	Settled bool
	Stages  []stage
	Bar     []timeSeg // the stages' spans as parts of one bar; empty when fewer than two times are known
	Total   string    // queued to settled
	// Attempt and Worker settled the job; Wrote are the attempts whose output the page holds.
	Attempt int64
	Worker  string
	Wrote   string
	Usage   string // what the sandbox measured; "" when nothing
}

type stage struct {
	Name    string
	At      string // UTC, the time of day to the millisecond; "" when missing
	Date    string // RFC 3339, for the time element
	After   string // how long after the previous stage that has a time
	Missing string // why there is no time
}

type timeSeg struct {
	Name  string // waiting, running, settling
	Took  string
	X, W  float64 // in percent of the bar
	Label string
}

// timelineOf reads a job's timeline from its settlement (nil before it settles) and the attempts
// its output pages came from.
func timelineOf(s *job.Settlement, wrote map[int64]bool) timeline {
	t := timeline{Wrote: joinAttempts(wrote)}
	if s == nil {
		for _, n := range []string{"queued", "claimed", "started", "finished", "settled"} {
			t.Stages = append(t.Stages, stage{Name: n, Missing: "shown once the job settles"})
		}
		return t
	}
	t.Settled, t.Attempt, t.Worker, t.Usage = true, s.Attempt, s.Worker, usageOf(s.Usage)
	notRun := "did not start: " + string(s.Status)
	if s.Status.Ran() || s.Status == job.StatusUnknown || s.Status == job.StatusCancelled {
		notRun = "not recorded"
	}
	times := []struct {
		name    string
		at      time.Time
		missing string
	}{
		{"queued", s.QueuedAt, "not recorded"},
		// The fleet records no claim time: a claim is the lease's, kept in Redis and not in the
		// settlement.
		{"claimed", time.Time{}, "not recorded by the fleet"},
		{"started", s.StartedAt, notRun},
		{"finished", s.FinishedAt, notRun},
		{"settled", s.SettledAt, "not recorded"},
	}
	var prev time.Time
	for _, x := range times {
		st := stage{Name: x.name}
		if x.at.IsZero() {
			st.Missing = x.missing
		} else {
			st.At, st.Date = x.at.UTC().Format("15:04:05.000"), x.at.UTC().Format(time.RFC3339Nano)
			if !prev.IsZero() {
				st.After = span(x.at.Sub(prev))
			}
			prev = x.at
		}
		t.Stages = append(t.Stages, st)
	}
	if !s.QueuedAt.IsZero() && !s.SettledAt.IsZero() {
		t.Total = span(s.SettledAt.Sub(s.QueuedAt))
		t.Bar = bar(s)
	}
	return t
}

// bar splits queued → settled into waiting (to the start), running and settling (the teardown:
// artifacts, the sandbox's removal, the settlement), or one span when the code never started.
func bar(s *job.Settlement) []timeSeg {
	total := s.SettledAt.Sub(s.QueuedAt)
	if total <= 0 {
		return nil
	}
	parts := []struct {
		name     string
		from, to time.Time
	}{{"waiting", s.QueuedAt, s.SettledAt}}
	if !s.StartedAt.IsZero() && !s.FinishedAt.IsZero() {
		parts = []struct {
			name     string
			from, to time.Time
		}{{"waiting", s.QueuedAt, s.StartedAt}, {"running", s.StartedAt, s.FinishedAt}, {"settling", s.FinishedAt, s.SettledAt}}
	}
	var out []timeSeg
	for _, p := range parts {
		d := p.to.Sub(p.from)
		seg := timeSeg{Name: p.name, Took: span(d), X: 100 * float64(p.from.Sub(s.QueuedAt)) / float64(total),
			W: max(100*float64(d)/float64(total), 0)}
		seg.Label = p.name + " " + seg.Took
		out = append(out, seg)
	}
	return out
}

// span prints a duration to the millisecond below a minute, to the second above.
func span(d time.Duration) string {
	if d < 0 {
		return "-" + span(-d)
	}
	if d >= time.Minute {
		return d.Round(time.Second).String()
	}
	return d.Round(time.Millisecond).String()
}

// usageOf prints what the sandbox measured.
func usageOf(u *job.Usage) string {
	if u == nil {
		return ""
	}
	out := "wall " + span(time.Duration(u.WallMS)*time.Millisecond)
	if u.CPUMS != nil {
		out += ", cpu " + span(time.Duration(*u.CPUMS)*time.Millisecond)
	}
	if u.MaxRSSBytes != nil {
		out += fmt.Sprintf(", peak memory %.1f MiB", float64(*u.MaxRSSBytes)/(1<<20))
	}
	return out
}

func joinAttempts(wrote map[int64]bool) string {
	var s []string
	for _, a := range slices.Sorted(maps.Keys(wrote)) {
		s = append(s, strconv.FormatInt(a, 10))
	}
	return strings.Join(s, ", ")
}

// source is a request's program as its source: code, preload and stdin as text, not as JSON
// strings; Rest is every other field as JSON.
type source struct {
	Language, Code, Preload, Stdin string
	Args                           []string
	Rest                           string
}

// sourceOf reads the request's program from its JSON; ok is false when it does not decode, and
// the page shows the JSON as it is.
func sourceOf(request string) (s source, ok bool) {
	if request == "" {
		return source{}, false
	}
	var r job.Request
	var fields map[string]json.RawMessage
	if json.Unmarshal([]byte(request), &r) != nil || json.Unmarshal([]byte(request), &fields) != nil {
		return source{}, false
	}
	for _, k := range []string{"language", "code", "preload", "stdin", "args"} {
		delete(fields, k)
	}
	s = source{Language: r.Language, Code: r.Code, Preload: r.Preload, Stdin: r.Stdin, Args: r.Args}
	if len(fields) > 0 {
		rest, err := json.MarshalIndent(fields, "", "  ")
		if err == nil {
			s.Rest = string(rest)
		}
	}
	return s, true
}
