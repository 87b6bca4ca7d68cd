package protocol

import "time"

// Heartbeat is what a worker publishes on the workers subject (job.Subjects.Workers) every
// HeartbeatPeriod, core NATS, and answers at once to a request on its ".ping" subject. A reader
// ignores a heartbeat without an ID.
type Heartbeat struct {
	ID       string    `json:"id"`
	Version  string    `json:"version"`
	Arch     string    `json:"arch"`     // GOARCH: amd64, arm64
	Provider string    `json:"provider"` // namespace, docker or gvisor
	Cgroup   string    `json:"cgroup"`   // "v1" or "v2": the host's cgroup hierarchy
	Profiles []string  `json:"profiles"`
	Queues   string    `json:"queues"`
	Slots    int       `json:"slots"`
	Running  int       `json:"running"` // slots in use
	Waiting  int       `json:"waiting"` // sandboxes created ahead and idle, across profiles
	At       time.Time `json:"at"`

	// Languages are the profiles again, with what each holds, for the gateway's language and
	// dependency routes; absent from a worker that predates them.
	Languages []Language `json:"languages,omitempty"`
}

// HeartbeatPeriod is how often a worker publishes its heartbeat: a reader that heard nothing for
// one period has heard from every worker that is up.
const HeartbeatPeriod = 2 * time.Second

// Anyone allowed to publish on the workers subject can send a heartbeat, so a reader bounds what
// it takes (docs/protocol.md, "Workers"): a heartbeat whose at is more than MaxHeartbeatSkew ahead
// of the reader's clock, or whose id is longer than MaxWorkerIDBytes, is ignored ([Heartbeat.Plausible]),
// and a list holds at most MaxWorkersListed workers.
const (
	MaxHeartbeatSkew = 30 * time.Second
	MaxWorkerIDBytes = 256
	MaxWorkersListed = 1000
)

// Plausible reports whether a reader whose clock says now takes hb.
func (hb Heartbeat) Plausible(now time.Time) bool {
	return hb.ID != "" && len(hb.ID) <= MaxWorkerIDBytes && !hb.At.After(now.Add(MaxHeartbeatSkew))
}

// Language is one profile a worker serves: its name, its version and other names, and the
// packages it provides ("name==version" as `pip freeze` prints them, or a name alone).
type Language struct {
	Name     string   `json:"name"`
	Version  string   `json:"version,omitempty"`
	Aliases  []string `json:"aliases,omitempty"`
	Packages []string `json:"packages,omitempty"`
}
