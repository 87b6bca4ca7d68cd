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

// Parse reads s. The error never repeats a password.
func Parse(s string) (*URL, error) {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return nil, fmt.Errorf("%w: no scheme (want redis://, rediss://, unix://, redis+sentinel:// or redis+cluster://)", ErrSyntax)
	}
	u := &URL{raw: s}
	switch scheme {
	case "redis", "rediss", "unix":
		o, err := redis.ParseURL(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %s", ErrSyntax, redactedError(err, s))
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

// Redacted is the URL with its passwords replaced by "xxxxx", for logs and errors.
func (u *URL) Redacted() string { return Redact(u.raw) }

// Redact replaces the password of a Redis URL of any accepted form, and a sentinel_password, by
// "xxxxx". A string that does not parse is returned with everything between "://" and the last
// "@" of its authority replaced.
func Redact(s string) string {
	scheme, rest, ok := strings.Cut(s, "://")
	if !ok {
		return s
	}
	end := strings.IndexAny(rest, "/?")
	if end < 0 {
		end = len(rest)
	}
	authority, tail := rest[:end], rest[end:]
	if at := strings.LastIndexByte(authority, '@'); at >= 0 {
		if name, _, hasPass := strings.Cut(authority[:at], ":"); hasPass {
			authority = name + ":xxxxx" + authority[at:]
		} else {
			authority = "xxxxx" + authority[at:]
		}
	}
	if i := strings.Index(tail, "sentinel_password="); i >= 0 {
		j := strings.IndexByte(tail[i:], '&')
		if j < 0 {
			tail = tail[:i] + "sentinel_password=xxxxx"
		} else {
			tail = tail[:i] + "sentinel_password=xxxxx" + tail[i+j:]
		}
	}
	return scheme + "://" + authority + tail
}

func redactedError(err error, raw string) string {
	msg := err.Error()
	if u, perr := url.Parse(raw); perr == nil && u.User != nil {
		if p, ok := u.User.Password(); ok && p != "" {
			msg = strings.ReplaceAll(msg, p, "xxxxx")
		}
	}
	return msg
}
