package redisurl_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/runfleet/runfleet/fleet/internal/redisurl"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

func TestParse(t *testing.T) {
	tests := []struct {
		name     string
		in       string
		kind     redisurl.Kind
		addrs    []string
		user     string
		password string
		master   string
		db       int
		sentinel string
	}{
		{name: "plain", in: "redis://127.0.0.1:6379/2", kind: redisurl.Single, addrs: []string{"127.0.0.1:6379"}, db: 2},
		{name: "plain with password", in: "redis://:s3cret@h:1/0", kind: redisurl.Single, addrs: []string{"h:1"}, password: "s3cret"},
		{name: "sentinel one host", in: "redis+sentinel://10.0.0.1:26379/mymaster", kind: redisurl.Sentinel,
			addrs: []string{"10.0.0.1:26379"}, master: "mymaster"},
		{name: "sentinel three hosts, db, passwords", in: "redis+sentinel://:p%40ss@a:26379,b:26380,[::1]:26381/m1/3?sentinel_password=sp",
			kind: redisurl.Sentinel, addrs: []string{"a:26379", "b:26380", "[::1]:26381"}, password: "p@ss", master: "m1", db: 3, sentinel: "sp"},
		{name: "sentinel user and password", in: "redis+sentinel://app:pw@a:1/m", kind: redisurl.Sentinel,
			addrs: []string{"a:1"}, user: "app", password: "pw", master: "m"},
		{name: "cluster", in: "redis+cluster://a:7000,b:7001,c:7002", kind: redisurl.Cluster, addrs: []string{"a:7000", "b:7001", "c:7002"}},
		{name: "cluster with password and a slash", in: "redis+cluster://:pw@a:7000/", kind: redisurl.Cluster, addrs: []string{"a:7000"}, password: "pw"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := redisurl.Parse(tt.in)
			if err != nil {
				t.Fatalf("Parse(%q) = %v", tt.in, err)
			}
			if u.Kind != tt.kind {
				t.Fatalf("Kind = %s, want %s", u.Kind, tt.kind)
			}
			var addrs []string
			var user, password, master, sentinel string
			var db int
			switch u.Kind {
			case redisurl.Single:
				addrs, user, password, db = []string{u.Single.Addr}, u.Single.Username, u.Single.Password, u.Single.DB
			case redisurl.Sentinel:
				f := u.Failover
				addrs, user, password, master, db, sentinel = f.SentinelAddrs, f.Username, f.Password, f.MasterName, f.DB, f.SentinelPassword
			case redisurl.Cluster:
				addrs, user, password = u.Cluster.Addrs, u.Cluster.Username, u.Cluster.Password
			}
			got := fmt.Sprint(addrs, user, password, master, db, sentinel)
			want := fmt.Sprint(tt.addrs, tt.user, tt.password, tt.master, tt.db, tt.sentinel)
			if got != want {
				t.Errorf("Parse(%q) = %s, want %s", tt.in, got, want)
			}
		})
	}
}

func TestParseRefuses(t *testing.T) {
	for _, in := range []string{
		"127.0.0.1:6379",
		"http://a:1",
		"redis+sentinel://a:1",                    // no master
		"redis+sentinel:///m",                     // no host
		"redis+sentinel://a/m",                    // no port
		"redis+sentinel://a:1,,b:2/m",             // empty address
		"redis+sentinel://a:99999/m",              // port out of range
		"redis+sentinel://a:1/m/x",                // db not a number
		"redis+sentinel://a:1/m/1/2",              // extra path
		"redis+sentinel://a:1/m?password=x",       // unknown parameter
		"redis+cluster://a:1/0",                   // a cluster has no db
		"redis+cluster://a:1?sentinel_password=x", // nor sentinels
		"redis+cluster://:hunter2@a:1,b/0",        // no port, and the password must not show
		"redis://:hunter2@a:1/notadb",             // go-redis's own error, redacted
	} {
		t.Run(in, func(t *testing.T) {
			u, err := redisurl.Parse(in)
			if err == nil {
				t.Fatalf("Parse(%q) = %+v, want an error", in, u)
			}
			if !errors.Is(err, redisurl.ErrSyntax) {
				t.Errorf("Parse(%q) = %v, want it to wrap ErrSyntax", in, err)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Errorf("Parse(%q) error %q repeats the password", in, err)
			}
		})
	}
}

func TestRedact(t *testing.T) {
	for in, want := range map[string]string{
		"redis://127.0.0.1:6379/0": "redis://127.0.0.1:6379/0",
		"redis://:pw@h:1/0":        "redis://REDACTED@h:1/0",
		"redis://user:pw@h:1":      "redis://REDACTED@h:1",
		"redis+sentinel://:pw@a:1,b:2/m/1?sentinel_password=sp": "redis+sentinel://REDACTED@a:1,b:2/m/1?sentinel_password=REDACTED",
		"redis+cluster://:p@w@a:1,b:2":                          "redis+cluster://REDACTED@a:1,b:2",
		"redis+sentinel://a:1/m?sentinel_password=sp&x=1":       "redis+sentinel://a:1/m?sentinel_password=REDACTED&x=1",
	} {
		if got := redisurl.Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestSentinel opens a redis+sentinel:// URL against a real master watched by a real Sentinel
// (Debian's redis-server in sentinel mode): the client finds the master through the Sentinel and
// its writes land there.
func TestSentinel(t *testing.T) {
	master := testenv.StartRedis(t)
	if err := master.Client().ConfigSet(t.Context(), "requirepass", "mpw").Err(); err != nil {
		t.Fatal(err)
	}
	sentinel := testenv.StartSentinel(t, master, "runfleet", "mpw")
	u, err := redisurl.Parse("redis+sentinel://:mpw@" + sentinel + "/runfleet/2")
	if err != nil {
		t.Fatal(err)
	}
	c := u.Open()
	defer c.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := c.Set(ctx, "through-sentinel", "yes", 0).Err(); err != nil {
		t.Fatalf("SET through the Sentinel: %v", err)
	}
	direct := redis.NewClient(&redis.Options{Addr: master.Addr, Password: "mpw", DB: 2})
	defer direct.Close()
	if got, err := direct.Get(ctx, "through-sentinel").Result(); err != nil || got != "yes" {
		t.Errorf("GET on the master's db 2 = %q, %v; want yes", got, err)
	}
	if _, ok := c.(*redis.Client); !ok {
		t.Errorf("Open() = %T, want the failover client (*redis.Client)", c)
	}
}

func TestOpenKinds(t *testing.T) {
	for in, want := range map[string]any{
		"redis://127.0.0.1:1/0":          &redis.Client{},
		"redis+cluster://127.0.0.1:1":    &redis.ClusterClient{},
		"redis+sentinel://127.0.0.1:1/m": &redis.Client{},
	} {
		u, err := redisurl.Parse(in)
		if err != nil {
			t.Fatal(err)
		}
		c := u.Open()
		if reflect.TypeOf(c) != reflect.TypeOf(want) {
			t.Errorf("Open(%q) = %T, want %T", in, c, want)
		}
		c.Close()
	}
}
