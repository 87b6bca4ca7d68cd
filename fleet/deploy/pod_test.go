//go:build deploy

package deploy_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"sigs.k8s.io/yaml"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/runfleet/runfleet/job"
)

// manifest decodes, strictly, the object of kind and name in the Kubernetes manifest file.
func manifest(t *testing.T, file, kind, name string, v any) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(b), "\n---\n") {
		var meta struct {
			Kind     string
			Metadata struct{ Name string }
		}
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		if meta.Kind == kind && meta.Metadata.Name == name {
			if err := decodeStrict([]byte(doc), v); err != nil {
				t.Fatalf("%s: %s %s: %v", file, kind, name, err)
			}
			return
		}
	}
	t.Fatalf("%s: no %s %s", file, kind, name)
}

// dockerRunArgs translates one container of a pod spec into `docker run` arguments: its image,
// command, args, env, privileges, host pid namespace, mounts and memory limit, exactly as declared.
// What it cannot translate fails the test, so that the manifest cannot grow past what is tested.
func dockerRunArgs(t *testing.T, pod corev1.PodSpec, c corev1.Container, name, network string, aliases ...string) []string {
	t.Helper()
	args := []string{"run", "-d", "--name", name, "--hostname", name, "--network", network, "--pull", "never"}
	for _, a := range aliases {
		args = append(args, "--network-alias", a)
	}
	if pod.HostNetwork || pod.HostIPC {
		t.Fatalf("%s: hostNetwork/hostIPC not translated", c.Name)
	}
	if pod.HostPID {
		args = append(args, "--pid", "host")
	}
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			env[e.Name] = strings.Split(aliases[0], ".")[0] // the pod's name, as its DNS label
		default:
			t.Fatalf("%s: env %s: valueFrom not translated", c.Name, e.Name)
		}
		args = append(args, "-e", e.Name+"="+env[e.Name])
	}
	// The kubelet expands $(NAME) in command and args from the container's env.
	expand := func(list []string) []string {
		out := make([]string, len(list))
		for i, a := range list {
			out[i] = varRef.ReplaceAllStringFunc(a, func(ref string) string {
				if v, ok := env[ref[2:len(ref)-1]]; ok {
					return v
				}
				return ref
			})
		}
		return out
	}
	if sc := c.SecurityContext; sc != nil {
		if sc.Privileged != nil && *sc.Privileged {
			args = append(args, "--privileged")
		}
		if sc.Capabilities != nil {
			for _, cp := range sc.Capabilities.Add {
				args = append(args, "--cap-add", string(cp))
			}
			for _, cp := range sc.Capabilities.Drop {
				args = append(args, "--cap-drop", string(cp))
			}
		}
		if sc.SeccompProfile != nil && sc.SeccompProfile.Type == corev1.SeccompProfileTypeUnconfined {
			args = append(args, "--security-opt", "seccomp=unconfined")
		}
		if sc.AppArmorProfile != nil && sc.AppArmorProfile.Type == corev1.AppArmorProfileTypeUnconfined {
			args = append(args, "--security-opt", "apparmor=unconfined")
		}
		if sc.RunAsUser != nil {
			args = append(args, "--user", fmt.Sprint(*sc.RunAsUser))
		}
		if sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
			args = append(args, "--read-only")
		}
	}
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		switch {
		case i >= 0 && pod.Volumes[i].HostPath != nil:
			v := pod.Volumes[i].HostPath.Path + ":" + m.MountPath
			if m.ReadOnly {
				v += ":ro"
			}
			args = append(args, "-v", v)
		case i < 0 && m.MountPath == "/data":
			// a volumeClaimTemplate: the container's own file system stands in for the claim
		default:
			t.Fatalf("%s: volume mount %s not translated", c.Name, m.Name)
		}
	}
	if mem := c.Resources.Limits.Memory(); !mem.IsZero() {
		args = append(args, "--memory", fmt.Sprint(mem.Value()))
	}
	if len(c.Command) > 0 {
		cmd := expand(c.Command)
		args = append(args, "--entrypoint", cmd[0], c.Image)
		args = append(args, cmd[1:]...)
	} else {
		args = append(args, c.Image)
	}
	return append(args, expand(c.Args)...)
}

var varRef = regexp.MustCompile(`\$\([A-Za-z_][A-Za-z0-9_]*\)`)

// TestPodShapedWorker runs the worker container of kubernetes/worker.yaml with `docker run` as
// the manifest declares it, next to the 3-node NATS cluster of kubernetes/nats.yaml and the Redis
// of kubernetes/redis.yaml, each container on the names the manifests use, and serves python3 and nodejs jobs.
func TestPodShapedWorker(t *testing.T) {
	needDocker(t)
	tag := fmt.Sprintf("rfdeploypod%d", os.Getpid())
	network := docker(t, "network", "create", tag)
	var started []string
	t.Cleanup(func() {
		if t.Failed() {
			for _, c := range started {
				out, _ := dockerTry("logs", "--tail", "30", c)
				t.Logf("logs of %s:\n%s", c, out)
			}
		}
		if len(started) > 0 {
			_, _ = dockerTry(append([]string{"rm", "-f"}, started...)...)
		}
		_, _ = dockerTry("network", "rm", network)
	})
	run := func(args []string) {
		t.Helper()
		docker(t, args...)
		started = append(started, args[slices.Index(args, "--name")+1])
	}

	var natsSet, redisSet appsv1.StatefulSet
	var workerDep appsv1.Deployment
	manifest(t, "kubernetes/nats.yaml", "StatefulSet", "nats", &natsSet)
	manifest(t, "kubernetes/redis.yaml", "StatefulSet", "redis", &redisSet)
	manifest(t, "kubernetes/worker.yaml", "Deployment", "worker", &workerDep)
	for i := range int(*natsSet.Spec.Replicas) {
		pod := fmt.Sprintf("nats-%d", i)
		run(dockerRunArgs(t, natsSet.Spec.Template.Spec, natsSet.Spec.Template.Spec.Containers[0], tag+"-"+pod, network,
			pod+"."+natsSet.Spec.ServiceName))
	}
	run(dockerRunArgs(t, redisSet.Spec.Template.Spec, redisSet.Spec.Template.Spec.Containers[0], tag+"-redis", network, "redis"))
	var urls []string
	for i := range int(*natsSet.Spec.Replicas) {
		urls = append(urls, "nats://"+containerIP(t, fmt.Sprintf("%s-nats-%d", tag, i))+":4222")
	}
	waitMetaLeader(t, strings.Join(urls, ","))
	spec := workerDep.Spec.Template.Spec
	c := spec.Containers[0]
	wargs := dockerRunArgs(t, spec, c, tag+"-worker", network, "worker")
	t.Logf("the pod's worker container: docker %s", strings.Join(wargs, " "))
	run(wargs)
	// The worker makes the streams (a client never does), so connect waits for it.
	nc, client := connect(t, strings.Join(urls, ","))
	waitWorkers(t, nc, 1, 2*time.Minute)
	ip := containerIP(t, tag+"-worker")
	for _, probe := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		port := c.Ports[slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == probe.HTTPGet.Port.StrVal })].ContainerPort
		url := fmt.Sprintf("http://%s:%d%s", ip, port, probe.HTTPGet.Path)
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("probe %s: %v", url, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("probe %s: %s", url, resp.Status)
		}
	}

	reqs, want := mixedJobs(4)
	// python3 and python3-data are forked from their zygotes (the worker's default): a forked
	// program's parent is the worker, outside the sandbox's pid namespace, so its ppid reads 0.
	// python3-data's numpy loads libblas.so.3 through /etc/alternatives of the image's root.
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	reqs = append(reqs, job.Request{ID: "deploy-zygote-" + stamp, Language: "python3", Code: "import os; print(os.getppid())"},
		job.Request{ID: "deploy-data-" + stamp, Language: "python3-data", Code: "import os, numpy; print(os.getppid(), numpy.int64(6) * 7)"})
	want["deploy-zygote-"+stamp], want["deploy-data-"+stamp] = "0\n", "0 42\n"
	got := runJobs(t, client, reqs, 2*time.Minute)
	for _, req := range reqs {
		if o := got[req.ID]; o.st.Status != job.StatusSucceeded || o.stdout != want[req.ID] {
			t.Errorf("%s job: %s %s %s, stdout %q, want succeeded and %q", req.Language, o.st.Status, o.st.Reason, o.st.Detail, o.stdout, want[req.ID])
		}
	}
	js := jsOf(t, nc)
	for _, name := range []string{"RUNFLEET_JOBS", "RUNFLEET_RESULTS", "RUNFLEET_CONTROL"} {
		st, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		if r := st.CachedInfo().Config.Replicas; r != 3 {
			t.Errorf("stream %s has %d replicas, want the 3 worker.yaml asks for", name, r)
		}
	}
}

func containerIP(t *testing.T, name string) string {
	t.Helper()
	return docker(t, "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", name)
}

// waitMetaLeader returns once the NATS cluster at url has elected its JetStream meta leader, as a
// pod's readiness would: before it, a worker's first stream creation times out and the pod restarts.
func waitMetaLeader(t *testing.T, url string) {
	t.Helper()
	nc, err := nats.Connect(url, nats.RetryOnFailedConnect(true), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("NATS at %s: no JetStream meta leader: %v", url, err)
		}
		time.Sleep(200 * time.Millisecond) // polling the cluster's election, an event AccountInfo reports
	}
}
