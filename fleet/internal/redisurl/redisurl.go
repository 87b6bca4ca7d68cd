// Package redisurl reads the --redis-url forms the fleet accepts and opens the matching go-redis
// client. go-redis parses only single-server URLs (redis://, rediss://, unix://); the Sentinel
// and Cluster forms are this package's own:
//
//	redis+sentinel://[[user]:password@]host:port[,host:port...]/MASTER[/db][?sentinel_password=P]
//	redis+cluster://[[user]:password@]host:port[,host:port...]
//
// The userinfo is the Redis servers' credential (for Sentinel, the master's and replicas'), never
// the Sentinels' own, which has its own query parameter. url.Parse cannot read a comma list of
// hosts, so the authority is split by hand.
package redisurl

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet/fleet/internal/redact"
)

// Kind is the topology a URL names.
type Kind string

const (
	Single   Kind = "single"
	Sentinel Kind = "sentinel"
	Cluster  Kind = "cluster"
)

// URL is a parsed --redis-url.
type URL struct {
	Kind Kind
	// Single is set for a plain URL (redis://, rediss://, unix://).
	Single *redis.Options
	// Failover is set for redis+sentinel://.
	Failover *redis.FailoverOptions
	// Cluster is set for redis+cluster://.
	Cluster *redis.ClusterOptions
	raw     string
}

// ErrSyntax is wrapped by every error Parse returns.
var ErrSyntax = errors.New("invalid redis url")

// Parse reads s. The error never repeats a credential: when s holds one, it names the redacted
// URL and not what the parser made of it (a '/' in a password puts part of it in the host).
func Parse(s string) (*URL, error) {
	u, err := parse(s)
	if err != nil && redact.HasSecret(s) {
		return nil, fmt.Errorf("%w: %s does not parse: percent-encode any of / ? # @ : %% in its user name and passwords", ErrSyntax, redact.URL(s))
	}
	return u, err
}

func parse(s string) (*URL, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return nil, fmt.Errorf("%w: no scheme (want redis://, rediss://, unix://, redis+sentinel:// or redis+cluster://)", ErrSyntax)
	}
	u := &URL{raw: s}
	switch scheme {
	case "redis", "rediss", "unix":
		o, err := redis.ParseURL(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrSyntax, err)
		}
		u.Kind, u.Single = Single, o
		return u, nil
	case "redis+sentinel", "redis+cluster":
	default:
		return nil, fmt.Errorf("%w: unknown scheme %q", ErrSyntax, scheme)
	}

	authority, path, _ := strings.Cut(rest, "/")
	var query string
	if i := strings.IndexByte(path, '?'); i >= 0 {
		path, query = path[:i], path[i+1:]
	} else if i := strings.IndexByte(authority, '?'); i >= 0 {
		authority, query = authority[:i], authority[i+1:]
	}
	var user, password string
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		info := authority[:at]
		authority = authority[at+1:]
		name, pass, hasPass := strings.Cut(info, ":")
		var err error
		if user, err = url.PathUnescape(name); err != nil {
			return nil, fmt.Errorf("%w: user name: bad escape", ErrSyntax)
		}
		if hasPass {
			if password, err = url.PathUnescape(pass); err != nil {
				return nil, fmt.Errorf("%w: password: bad escape", ErrSyntax)
			}
		}
	}
	addrs, err := hosts(authority)
	if err != nil {
		return nil, err
	}
	params, err := url.ParseQuery(query)
	if err != nil {
		return nil, fmt.Errorf("%w: query: %v", ErrSyntax, err)
	}

	if scheme == "redis+cluster" {
		if path != "" {
			return nil, fmt.Errorf("%w: redis+cluster:// takes no path (a cluster has only database 0)", ErrSyntax)
		}
		if len(params) > 0 {
			return nil, fmt.Errorf("%w: redis+cluster:// takes no query parameters", ErrSyntax)
		}
		u.Kind = Cluster
		u.Cluster = &redis.ClusterOptions{Addrs: addrs, Username: user, Password: password}
		return u, nil
	}

	master, dbText, _ := strings.Cut(path, "/")
	if master == "" {
		return nil, fmt.Errorf("%w: redis+sentinel:// needs the master's name as its path (/MASTER)", ErrSyntax)
	}
	if master, err = url.PathUnescape(master); err != nil {
		return nil, fmt.Errorf("%w: master name: bad escape", ErrSyntax)
	}
	db := 0
	if dbText != "" {
		if db, err = strconv.Atoi(dbText); err != nil || db < 0 || strings.Contains(dbText, "/") {
			return nil, fmt.Errorf("%w: database %q is not a number", ErrSyntax, dbText)
		}
	}
	f := &redis.FailoverOptions{MasterName: master, SentinelAddrs: addrs, Username: user, Password: password, DB: db}
	for k, v := range params {
		switch k {
		case "sentinel_password":
			f.SentinelPassword = v[len(v)-1]
		default:
			return nil, fmt.Errorf("%w: unknown query parameter %q (known: sentinel_password)", ErrSyntax, k)
		}
	}
	u.Kind, u.Failover = Sentinel, f
	return u, nil
}

func hosts(authority string) ([]string, error) {
	if authority == "" {
		return nil, fmt.Errorf("%w: no host", ErrSyntax)
	}
	var addrs []string
	for _, h := range strings.Split(authority, ",") {
		host, port, err := net.SplitHostPort(h)
		if err != nil {
			return nil, fmt.Errorf("%w: address %q: want host:port", ErrSyntax, h)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 || host == "" {
			return nil, fmt.Errorf("%w: address %q: want host:port", ErrSyntax, h)
		}
		addrs = append(addrs, net.JoinHostPort(host, port))
	}
	return addrs, nil
}

// Open returns the client for the URL's topology, with contextTimeout set as the fleet needs (no
// lease call may outlive its trust window).
func (u *URL) Open() redis.UniversalClient {
	switch u.Kind {
	case Sentinel:
		o := *u.Failover
		o.ContextTimeoutEnabled = true
		return redis.NewFailoverClient(&o)
	case Cluster:
		o := *u.Cluster
		o.ContextTimeoutEnabled = true
		return redis.NewClusterClient(&o)
	default:
		o := *u.Single
		o.ContextTimeoutEnabled = true
		return redis.NewClient(&o)
	}
}

// Redacted is the URL with its credentials replaced, for logs and errors.
func (u *URL) Redacted() string { return redact.URL(u.raw) }

// Redact replaces the credentials of a Redis URL of any accepted form (userinfo and
// sentinel_password), for logs and errors.
func Redact(s string) string { return redact.URL(s) }
