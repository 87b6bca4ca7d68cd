// Package deploy_test loads the deployment files with real parsers: the compose file with the
// Compose specification's own loader, and every Kubernetes manifest strictly into the
// k8s.io/api types, so that a typo or an unknown field fails here and not at deploy time.
package deploy_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

func TestComposeFile(t *testing.T) {
	opts, err := cli.NewProjectOptions([]string{"compose.yaml"}, cli.WithWorkingDirectory("."), cli.WithName("runfleet"),
		cli.WithEnv([]string{"RUNFLEET_API_KEY=k"}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(t.Context())
	if err != nil {
		t.Fatalf("load compose.yaml: %v", err)
	}
	for _, name := range []string{"nats", "redis", "worker", "gateway"} {
		if _, err := p.GetService(name); err != nil {
			t.Errorf("service %s: %v", name, err)
		}
	}
	w, _ := p.GetService("worker")
	if w.Environment["RUNFLEET_PROVIDER"] == nil || *w.Environment["RUNFLEET_PROVIDER"] != "namespace" {
		t.Errorf("worker provider = %v, want namespace", w.Environment["RUNFLEET_PROVIDER"])
	}
	if !slices.ContainsFunc(w.Volumes, func(v types.ServiceVolumeConfig) bool { return v.Target == "/sys/fs/cgroup" }) {
		t.Errorf("worker does not mount the host's cgroup tree")
	}
	// Sandbox uids are unique on the host only if every worker locks them in the host's directory.
	if !slices.ContainsFunc(w.Volumes, func(v types.ServiceVolumeConfig) bool {
		return v.Source == "/run/runfleet" && v.Target == "/run/runfleet"
	}) {
		t.Errorf("worker does not share the host's /run/runfleet (uid locks)")
	}
	if w.Pid != "host" || !slices.Contains(w.CapAdd, "SYS_ADMIN") {
		t.Errorf("worker pid %q, cap_add %v: want the host's pid namespace and SYS_ADMIN", w.Pid, w.CapAdd)
	}
	g, _ := p.GetService("gateway")
	// Only the gateway is on the network other projects (Dify) join: NATS and Redis take no
	// credential in this file.
	for _, svc := range p.Services {
		_, onEdge := svc.Networks["edge"]
		if onEdge != (svc.Name == "gateway") {
			t.Errorf("service %s on the edge network: %v, want only the gateway", svc.Name, onEdge)
		}
	}
	if !slices.Equal(g.Entrypoint, []string{"/usr/local/bin/gateway"}) || g.Environment["RUNFLEET_API_KEY"] == nil {
		t.Errorf("gateway entrypoint %v, key %v: want the gateway program and the key from the environment", g.Entrypoint, g.Environment["RUNFLEET_API_KEY"])
	}
	// Without a key, compose refuses to start rather than run a gateway that refuses every request.
	bare, err := cli.NewProjectOptions([]string{"compose.yaml"}, cli.WithWorkingDirectory("."), cli.WithName("runfleet"), cli.WithEnv([]string{"RUNFLEET_API_KEY="}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bare.LoadProject(t.Context()); err == nil || !strings.Contains(err.Error(), "RUNFLEET_API_KEY") {
		t.Errorf("compose.yaml without RUNFLEET_API_KEY loads (%v), want it refused naming the variable", err)
	}
	r, _ := p.GetService("redis")
	if !slices.Contains(r.Command, "--appendonly") {
		t.Errorf("redis command %v lacks AOF", r.Command)
	}
}

// decodeStrict turns one YAML document into v, refusing unknown fields.
func decodeStrict(doc []byte, v any) error {
	j, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}

func TestKubernetesManifests(t *testing.T) {
	files, _ := filepath.Glob("kubernetes/*.yaml")
	var deployments []appsv1.Deployment
	kinds := map[string]int{}
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range strings.Split(string(b), "\n---\n") {
			var meta struct{ Kind string }
			if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			var obj any
			switch meta.Kind {
			case "Deployment":
				obj = &appsv1.Deployment{}
			case "StatefulSet":
				obj = &appsv1.StatefulSet{}
			case "Service":
				obj = &corev1.Service{}
			case "Namespace":
				obj = &corev1.Namespace{}
			case "PodDisruptionBudget":
				obj = &policyv1.PodDisruptionBudget{}
			default:
				t.Errorf("%s: unexpected kind %q", f, meta.Kind)
				continue
			}
			if err := decodeStrict([]byte(doc), obj); err != nil {
				t.Errorf("%s: %s: %v", f, meta.Kind, err)
				continue
			}
			kinds[meta.Kind]++
			if d, ok := obj.(*appsv1.Deployment); ok {
				deployments = append(deployments, *d)
			}
		}
	}
	if kinds["PodDisruptionBudget"] != 1 || kinds["StatefulSet"] != 2 || len(deployments) != 2 {
		t.Fatalf("kinds = %v, want worker and gateway Deployments, a PDB, NATS and Redis StatefulSets", kinds)
	}
	byName := map[string]appsv1.Deployment{}
	for _, d := range deployments {
		byName[d.Name] = d
	}
	checkGatewayDeployment(t, byName["gateway"])
	deployments = []appsv1.Deployment{byName["worker"]}
	c := deployments[0].Spec.Template.Spec.Containers[0]
	port := map[string]int32{}
	for _, p := range c.Ports {
		port[p.Name] = p.ContainerPort
	}
	listen := ""
	for _, e := range c.Env {
		if e.Name == "RUNFLEET_LISTEN" {
			listen = e.Value
		}
	}
	for name, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if probe == nil || probe.HTTPGet == nil {
			t.Errorf("%s probe: want an HTTP GET", name)
			continue
		}
		want := map[string]string{"liveness": "/healthz", "readiness": "/readyz"}[name]
		p := port[probe.HTTPGet.Port.StrVal]
		if probe.HTTPGet.Path != want || p == 0 || !strings.HasSuffix(listen, ":"+strconv.Itoa(int(p))) {
			t.Errorf("%s probe = %s on port %v (%d), want %s on the port of RUNFLEET_LISTEN %q", name, probe.HTTPGet.Path, probe.HTTPGet.Port, p, want, listen)
		}
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("worker has no resource requests")
	}
	// Sandbox uids are unique on the node only if every pod locks them in the node's directory.
	pod := deployments[0].Spec.Template.Spec
	i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.HostPath != nil && v.HostPath.Path == "/run/runfleet" })
	if i < 0 || !slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.Name == pod.Volumes[i].Name && m.MountPath == "/run/runfleet"
	}) {
		t.Errorf("worker does not mount the node's /run/runfleet (uid locks)")
	}
}

// checkGatewayDeployment: the gateway runs the gateway program with its key from a Secret, probes
// its public health routes, and runs with none of the worker's node permissions.
func checkGatewayDeployment(t *testing.T, d appsv1.Deployment) {
	t.Helper()
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("gateway Deployment %q has %d containers, want 1", d.Name, len(pod.Containers))
	}
	c := pod.Containers[0]
	if !slices.Equal(c.Command, []string{"/usr/local/bin/gateway"}) {
		t.Errorf("gateway command %v, want the gateway program", c.Command)
	}
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "RUNFLEET_API_KEY" })
	if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.SecretKeyRef == nil {
		t.Errorf("gateway key: want RUNFLEET_API_KEY from a Secret")
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("gateway readiness probe: want GET /readyz")
	}
	if pod.HostPID || len(pod.Volumes) > 0 || c.SecurityContext == nil || c.SecurityContext.Capabilities == nil ||
		!slices.Contains(c.SecurityContext.Capabilities.Drop, "ALL") {
		t.Errorf("gateway pod: want no host pid, no volumes and every capability dropped")
	}
}

// TestNATSImageVersion: the nats-server the registry Dockerfile installs is the one go.mod pins,
// which `make images` builds offline, so both describe the same image.
func TestNATSImageVersion(t *testing.T) {
	version := func(file, prefix string) string {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for line := range strings.Lines(string(b)) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
				return v
			}
		}
		t.Fatalf("%s: no line starting %q", file, prefix)
		return ""
	}
	pinned := version("../go.mod", "github.com/nats-io/nats-server/v2 ")
	if got := version("nats/Dockerfile", "ARG NATS_VERSION="); got != pinned {
		t.Errorf("deploy/nats/Dockerfile installs nats-server %s, fleet/go.mod pins %s", got, pinned)
	}
}
