package main

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/runfleet/runfleet/fleet/internal/cli"
)

func TestArtifactsMaxBytesFlag(t *testing.T) {
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want int64
	}{
		{name: "default", want: 10 << 30},
		{name: "GiB", args: []string{"--artifacts-max-bytes", "2GiB"}, want: 2 << 30},
		{name: "g", args: []string{"--artifacts-max-bytes", "2g"}, want: 2 << 30},
		{name: "bytes", args: []string{"--artifacts-max-bytes", "1048576"}, want: 1 << 20},
		{name: "env", env: map[string]string{"RUNFLEET_ARTIFACTS_MAX_BYTES": "512m"}, want: 512 << 20},
		{name: "flag wins", args: []string{"--artifacts-max-bytes", "1TiB"}, env: map[string]string{"RUNFLEET_ARTIFACTS_MAX_BYTES": "512MiB"}, want: 1 << 40},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, cfg := flags(io.Discard)
			if err := cli.Parse(fs, c.args, func(k string) string { return c.env[k] }); err != nil {
				t.Fatal(err)
			}
			if got := int64(cfg.artifactsMaxBytes); got != c.want {
				t.Errorf("artifacts max bytes = %d, want %d", got, c.want)
			}
		})
	}
	if got := func() *flag.FlagSet { fs, _ := flags(io.Discard); return fs }().Lookup("artifacts-max-bytes").DefValue; got != "10GiB" {
		t.Errorf("default shown as %q, want 10GiB", got)
	}
	base := []string{"--nats-url", "nats://127.0.0.1:1", "--redis-url", "redis://127.0.0.1:1/0"}
	for _, bad := range []string{"0", "-1", "10GB", "lots", "9999999TiB"} {
		err := run(t.Context(), t.Context(), append(base, "--artifacts-max-bytes", bad), func(string) string { return "" }, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "artifacts-max-bytes") || strings.Contains(err.Error(), "unreachable") {
			t.Errorf("--artifacts-max-bytes %s: error = %v, want one about the flag", bad, err)
		}
	}
}
