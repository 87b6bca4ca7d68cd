package job

import (
	"cmp"
	"encoding/json"
	"math"
	"time"
)

// Limits bound one job. A zero field takes the worker's default; a negative one is invalid.
//
// On the wire every limit is a positive whole number (`timeout_ms`, `output_bytes`, …) and a
// missing one means the default: a zero written out is a rejection, not the default, so Limits
// encodes only its non-zero fields, and decoding refuses a present zero, negative or fractional
// value with [ReasonInvalidLimits].
type Limits struct {
	Timeout     time.Duration // timeout_ms; sent in whole milliseconds, rounded up
	OutputBytes int64         // output_bytes: stdout and stderr together
	PageBytes   int64         // page_bytes
	MaxPages    int64         // max_pages
	MemoryBytes int64         // memory_bytes
	Pids        int64         // pids: processes and threads

	// ArtifactBytes and ArtifactFiles bound the files kept as artifacts (see Request.Outputs).
	ArtifactBytes int64 // artifact_bytes: all artifacts together
	ArtifactFiles int64 // artifact_files
}

// wireLimits is Limits as docs/protocol.md writes it; a nil field is a missing key.
type wireLimits struct {
	TimeoutMS     *int64 `json:"timeout_ms,omitempty"`
	OutputBytes   *int64 `json:"output_bytes,omitempty"`
	PageBytes     *int64 `json:"page_bytes,omitempty"`
	MaxPages      *int64 `json:"max_pages,omitempty"`
	MemoryBytes   *int64 `json:"memory_bytes,omitempty"`
	Pids          *int64 `json:"pids,omitempty"`
	ArtifactBytes *int64 `json:"artifact_bytes,omitempty"`
	ArtifactFiles *int64 `json:"artifact_files,omitempty"`
}

// limitField is one limit: its wire name, the Go field, and the policy's bounds of it.
type limitField struct {
	name     string
	v        *int64
	wire     **int64
	min, max int64
}

// fields lists l's limits beside w's; p gives their bounds, in the wire's units.
func (l *Limits) fields(w *wireLimits, p *Policy) []limitField {
	ms := l.Timeout.Milliseconds()
	if l.Timeout%time.Millisecond > 0 {
		ms++
	}
	fs := []limitField{
		{name: "timeout_ms", v: &ms, wire: &w.TimeoutMS},
		{name: "output_bytes", v: &l.OutputBytes, wire: &w.OutputBytes},
		{name: "page_bytes", v: &l.PageBytes, wire: &w.PageBytes},
		{name: "max_pages", v: &l.MaxPages, wire: &w.MaxPages},
		{name: "memory_bytes", v: &l.MemoryBytes, wire: &w.MemoryBytes},
		{name: "pids", v: &l.Pids, wire: &w.Pids},
		{name: "artifact_bytes", v: &l.ArtifactBytes, wire: &w.ArtifactBytes},
		{name: "artifact_files", v: &l.ArtifactFiles, wire: &w.ArtifactFiles},
	}
	if p != nil {
		for i, b := range []struct{ min, max int64 }{
			{p.Min.Timeout.Milliseconds(), p.Max.Timeout.Milliseconds()},
			{p.Min.OutputBytes, p.Max.OutputBytes},
			{p.Min.PageBytes, p.Max.PageBytes},
			{p.Min.MaxPages, p.Max.MaxPages},
			{p.Min.MemoryBytes, p.Max.MemoryBytes},
			{p.Min.Pids, p.Max.Pids},
			{p.Min.ArtifactBytes, p.Max.ArtifactBytes},
			{p.Min.ArtifactFiles, p.Max.ArtifactFiles},
		} {
			fs[i].min, fs[i].max = b.min, b.max
		}
	}
	return fs
}

// MarshalJSON writes the non-zero limits under their wire names.
func (l Limits) MarshalJSON() ([]byte, error) {
	var w wireLimits
	for _, f := range l.fields(&w, nil) {
		if *f.v != 0 {
			*f.wire = f.v
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads the wire form. A limit that is present must be a positive whole number; the
// error otherwise is a *RejectError with [ReasonInvalidLimits].
func (l *Limits) UnmarshalJSON(b []byte) error {
	var w wireLimits
	if err := json.Unmarshal(b, &w); err != nil {
		return reject(ReasonInvalidLimits, "%v", err)
	}
	var out Limits
	for _, f := range out.fields(&w, nil) {
		if *f.wire == nil {
			continue
		}
		if v := **f.wire; v < 1 {
			return reject(ReasonInvalidLimits, "%s is %d, want a positive whole number (leave it out for the default)", f.name, v)
		}
		*f.v = **f.wire
	}
	if w.TimeoutMS != nil {
		if *w.TimeoutMS > math.MaxInt64/int64(time.Millisecond) {
			return reject(ReasonInvalidLimits, "timeout_ms is %d, too large", *w.TimeoutMS)
		}
		out.Timeout = time.Duration(*w.TimeoutMS) * time.Millisecond
	}
	*l = out
	return nil
}

// resolve checks the set limits against p and returns the bounds the job runs with. A zero field
// of p.Max means no maximum; a zero field of p.Min means 1.
func (l Limits) resolve(p Policy) (Bounds, error) {
	var w wireLimits
	fs := l.fields(&w, &p)
	if l.Timeout < 0 {
		return Bounds{}, reject(ReasonInvalidLimits, "timeout is %s, want a positive duration or zero for the default", l.Timeout)
	}
	for _, f := range fs {
		if *f.v == 0 {
			continue
		}
		lo, hi := max(f.min, 1), f.max
		if hi == 0 {
			hi = math.MaxInt64
		}
		if *f.v < lo || *f.v > hi {
			if hi == math.MaxInt64 {
				return Bounds{}, reject(ReasonInvalidLimits, "%s is %d, want at least %d", f.name, *f.v, lo)
			}
			return Bounds{}, reject(ReasonInvalidLimits, "%s is %d, want %d to %d", f.name, *f.v, lo, hi)
		}
	}
	b := p.Default
	if l.Timeout != 0 {
		b.Timeout = time.Duration(*fs[0].v) * time.Millisecond // what the wire carries
	}
	b.OutputBytes = cmp.Or(l.OutputBytes, b.OutputBytes)
	b.PageBytes = cmp.Or(l.PageBytes, b.PageBytes)
	b.MaxPages = cmp.Or(l.MaxPages, b.MaxPages)
	b.MemoryBytes = cmp.Or(l.MemoryBytes, b.MemoryBytes)
	b.Pids = cmp.Or(l.Pids, b.Pids)
	b.ArtifactBytes = cmp.Or(l.ArtifactBytes, b.ArtifactBytes)
	b.ArtifactFiles = cmp.Or(l.ArtifactFiles, b.ArtifactFiles)
	if l.MaxPages == 0 {
		b.MaxPages = max(b.MaxPages, PagesNeeded(b.Timeout, b.OutputBytes, b.PageBytes))
		if p.Max.MaxPages > 0 {
			b.MaxPages = min(b.MaxPages, p.Max.MaxPages)
		}
	}
	return b, nil
}
