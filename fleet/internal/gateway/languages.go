package gateway

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"time"

	"github.com/runfleet/runfleet/protocol"
)

// AnnounceWait is how long a route that asks the workers what they serve waits for their
// answers: a worker answers the ping at once (protocol.Heartbeat).
const AnnounceWait = 250 * time.Millisecond

// maxAnnouncements bounds the answers read, as the web view bounds its list of workers: anyone
// allowed to publish on the reply subject could send more.
const maxAnnouncements = 1000

// announced asks the workers for their heartbeats and returns the languages they serve, each
// worker's list as it sent it. It returns what arrived within AnnounceWait or until ctx ends.
func (g *Gateway) announced(ctx context.Context) ([][]protocol.Language, error) {
	inbox := g.nc.NewRespInbox()
	sub, err := g.nc.SubscribeSync(inbox)
	if err != nil {
		return nil, err
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := g.nc.PublishRequest(g.subjects.WorkersPing(), inbox, nil); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, AnnounceWait)
	defer cancel()
	var out [][]protocol.Language
	seen := map[string]bool{}
	for len(out) < maxAnnouncements {
		m, err := sub.NextMsgWithContext(ctx)
		if err != nil {
			break // the wait is over
		}
		var hb protocol.Heartbeat
		if json.Unmarshal(m.Data, &hb) != nil || hb.ID == "" || seen[hb.ID] {
			continue
		}
		seen[hb.ID] = true
		out = append(out, hb.Languages)
	}
	return out, nil
}

// announcedPackages is the union of the packages the workers announce for language (a
// profile's name or alias), and whether any worker announced them (a worker that predates the
// announcement, or a profile whose packages it does not know, announces none).
func announcedPackages(workers [][]protocol.Language, language string) ([]Dependency, bool) {
	var deps []Dependency
	found := false
	for _, langs := range workers {
		for _, l := range langs {
			if (l.Name != language && !slices.Contains(l.Aliases, language)) || l.Packages == nil {
				continue
			}
			found = true
			for _, p := range l.Packages {
				name, version, _ := strings.Cut(p, "==")
				d := Dependency{Name: name, Version: version}
				if !slices.Contains(deps, d) {
					deps = append(deps, d)
				}
			}
		}
	}
	slices.SortFunc(deps, func(a, b Dependency) int {
		return strings.Compare(strings.ToLower(a.Name), strings.ToLower(b.Name))
	})
	return deps, found
}
