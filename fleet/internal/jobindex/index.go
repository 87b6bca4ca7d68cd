package jobindex

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet/fleet/internal/keyspace"
	"github.com/runfleet/runfleet/job"
)

// DefaultRetention is how long a row is kept when Options.Retention is zero: the job record's.
const DefaultRetention = 7 * 24 * time.Hour

// Options configure an [Index]. Zero fields take the defaults named.
type Options struct {
	Prefix    string        // key prefix (package keyspace); default job.DefaultPrefix
	Retention time.Duration // default DefaultRetention
	// ArtifactTTL is how long an artifact is kept (the artifacts bucket's TTL), for the tenants'
	// usage; default DefaultArtifactTTL.
	ArtifactTTL time.Duration
}

// Index is the list of settled jobs, newest first.
type Index struct {
	rdb         redis.UniversalClient
	keys        keyspace.Keys
	retention   time.Duration
	artifactTTL time.Duration
}

// New returns the index kept in rdb.
func New(rdb redis.UniversalClient, o Options) *Index {
	return &Index{rdb: rdb, keys: keyspace.New(o.Prefix), retention: cmp.Or(o.Retention, DefaultRetention),
		artifactTTL: cmp.Or(o.ArtifactTTL, DefaultArtifactTTL)}
}

// Add lists settled jobs, in one round trip. Adding a row again changes nothing.
func (x *Index) Add(ctx context.Context, rows ...job.Listed) error {
	old := "(" + strconv.FormatInt(time.Now().Add(-x.retention).UnixMilli(), 10)
	trim := map[string]bool{}
	_, err := x.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, l := range rows {
			member, err := json.Marshal(l)
			if err != nil {
				return fmt.Errorf("index %s: %w", l.JobID, err)
			}
			z := redis.Z{Score: float64(l.SettledAt.UnixMilli()), Member: member}
			for _, s := range []job.Status{l.Status, ""} {
				for _, q := range []string{l.Queue, ""} {
					for _, t := range []string{l.Tenant, ""} {
						k := x.keys.Index(s, q, t)
						p.ZAdd(ctx, k, z)
						trim[k] = true
					}
				}
			}
		}
		for k := range trim {
			p.ZRemRangeByScore(ctx, k, "-inf", old)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("index %d rows: %w", len(rows), err)
	}
	return nil
}

// bounds is the sorted set q reads and its score range, without the cursor.
func (x *Index) bounds(q job.ListQuery) (key, lo, hi string) {
	// Rows are trimmed only in the sets a new row goes to: one that gets none keeps rows past the
	// retention, whose requests are gone, so the floor is the retention whatever Since says.
	floor := time.Now().Add(-x.retention)
	if q.Since.After(floor) {
		floor = q.Since
	}
	lo, hi = strconv.FormatInt(floor.UnixMilli(), 10), "+inf"
	if !q.Until.IsZero() {
		hi = "(" + strconv.FormatInt(untilMS(q.Until), 10)
	}
	return x.keys.Index(q.Status, q.Queue, q.Tenant), lo, hi
}

// untilMS is the score bound of an exclusive Until: scores are settle times truncated to the
// millisecond, so a job settled before Until in Until's own millisecond has Until's truncated
// score, and the bound is the next millisecond when Until has a remainder.
func untilMS(until time.Time) int64 {
	ms := until.UnixMilli()
	if until.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

// Count returns how many jobs each filter of c selects, in one round trip to Redis.
func (x *Index) Count(ctx context.Context, c job.CountQuery) (job.JobCounts, error) {
	if err := c.Validate(); err != nil {
		return job.JobCounts{}, err
	}
	cmds := make([]*redis.IntCmd, len(c.Queries))
	_, err := x.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, q := range c.Queries {
			key, lo, hi := x.bounds(q)
			cmds[i] = p.ZCount(ctx, key, lo, hi)
		}
		return nil
	})
	if err != nil {
		return job.JobCounts{}, fmt.Errorf("count %d filters: %w", len(c.Queries), err)
	}
	out := job.JobCounts{Counts: make([]int64, len(cmds))}
	for i, cmd := range cmds {
		out.Counts[i] = cmd.Val()
	}
	return out, nil
}

// List returns one page of the jobs q selects, newest first.
func (x *Index) List(ctx context.Context, q job.ListQuery) (job.JobList, error) {
	if err := q.Validate(); err != nil {
		return job.JobList{}, err
	}
	limit := cmp.Or(q.Limit, job.DefaultListLimit)
	key, lo, hi := x.bounds(q)
	out := job.JobList{}
	if q.Count {
		c, err := x.rdb.ZCount(ctx, key, lo, hi).Result()
		if err != nil {
			return job.JobList{}, fmt.Errorf("count %s: %w", key, err)
		}
		out.Count = &c
	}
	var cursorMS, skip int64
	if q.Cursor != "" {
		var err error
		if cursorMS, skip, err = parseCursor(q.Cursor); err != nil {
			return job.JobList{}, err
		}
		if !q.Until.IsZero() && cursorMS >= untilMS(q.Until) {
			return job.JobList{}, fmt.Errorf("%w: cursor %q is past until", job.ErrInvalidQuery, q.Cursor)
		}
		hi = strconv.FormatInt(cursorMS, 10)
	}
	// One more than the page tells whether another page follows.
	zs, err := x.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{Key: key, Start: hi, Stop: lo,
		ByScore: true, Rev: true, Offset: skip, Count: int64(limit) + 1}).Result()
	if err != nil {
		return job.JobList{}, fmt.Errorf("list %s: %w", key, err)
	}
	out.Jobs = make([]job.Listed, 0, min(len(zs), limit))
	for i, z := range zs {
		if i == limit {
			break
		}
		var l job.Listed
		if err := json.Unmarshal([]byte(z.Member.(string)), &l); err != nil {
			return job.JobList{}, fmt.Errorf("list %s: row %q: %w", key, z.Member, err)
		}
		out.Jobs = append(out.Jobs, l)
	}
	if len(zs) > limit {
		last := int64(zs[limit-1].Score)
		n := int64(0)
		for _, z := range zs[:limit] {
			if int64(z.Score) == last {
				n++
			}
		}
		if q.Cursor != "" && last == cursorMS {
			n += skip // rows of that millisecond listed by earlier pages
		}
		out.Cursor = strconv.FormatInt(last, 10) + "." + strconv.FormatInt(n, 10)
	}
	return out, nil
}

func parseCursor(c string) (ms, n int64, err error) {
	a, b, ok := strings.Cut(c, ".")
	if ok {
		ms, err = strconv.ParseInt(a, 10, 64)
	}
	if ok && err == nil {
		n, err = strconv.ParseInt(b, 10, 64)
	}
	if !ok || err != nil || n < 0 {
		return 0, 0, fmt.Errorf("%w: cursor %q", job.ErrInvalidQuery, c)
	}
	return ms, n, nil
}
