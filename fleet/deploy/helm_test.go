//go:build deploy

package deploy_test

import (
	"encoding/json"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/runfleet/runfleet/fleet/internal/backlog"
	"github.com/runfleet/runfleet/fleet/internal/testenv"
)

const chartDir = "helm/runfleet"

// helmValueSets are the chart's main configurations: what TestHelmChart lints and renders.
var helmValueSets = []struct {
	name     string
	set      []string
	provider string
}{
	{name: "defaults", provider: "namespace"},
	{name: "docker", set: []string{"provider=docker", "worker.maxTimeout=600"}, provider: "docker"},
	{name: "monitoring-ingress", set: []string{"monitoring.enabled=true", "monitoring.labels.release=prometheus",
		"gateway.ingress.enabled=true", "gateway.ingress.className=nginx", "gateway.ingress.tls.enabled=true",
		"redis.sentinel.enabled=false"}, provider: "namespace"},
	{name: "autoscaling", set: []string{"autoscaling.enabled=true", "autoscaling.queues={default,gpu}", "autoscaling.maxReplicas=20"}, provider: "namespace"},
}

// TestHelmChart lints and renders the chart for each value set and decodes every document it
// renders strictly into the Kubernetes Go types (prometheus-operator's, which are not a
// dependency, into mirrors of the fields the chart sets), then checks what the fleet relies on.
func TestHelmChart(t *testing.T) {
	if _, err := exec.LookPath("helm"); err != nil {
		testenv.Missing(t, "helm (scripts/setup deploy): %v", err)
	}
	for _, vs := range helmValueSets {
		t.Run(vs.name, func(t *testing.T) {
			t.Parallel()
			var args []string
			for _, s := range vs.set {
				args = append(args, "--set", s)
			}
			if out, err := exec.Command("helm", append([]string{"lint", "--strict", chartDir}, args...)...).CombinedOutput(); err != nil {
				t.Fatalf("helm lint: %v\n%s", err, out)
			}
			out, err := exec.Command("helm", append([]string{"template", "runfleet", chartDir, "--namespace", "runfleet"}, args...)...).Output()
			if err != nil {
				t.Fatalf("helm template: %v\n%s", err, stderrOf(err))
			}
			r := decodeRendered(t, out)
			monitoring := slices.Contains(vs.set, "monitoring.enabled=true")
			sentinel := !slices.Contains(vs.set, "redis.sentinel.enabled=false")
			wantKinds := map[string]int{
				"Deployment": 2, "StatefulSet": 2, "Service": 4, "PodDisruptionBudget": 3,
				"NetworkPolicy": 4, "ServiceAccount": 2,
			}
			if sentinel {
				wantKinds["StatefulSet"]++
				wantKinds["Service"]++
				wantKinds["PodDisruptionBudget"]++
			}
			if slices.Contains(vs.set, "gateway.ingress.enabled=true") {
				wantKinds["Ingress"] = 1
			}
			if monitoring {
				wantKinds["ServiceMonitor"], wantKinds["PrometheusRule"], wantKinds["ConfigMap"] = 2, 1, 1
			}
			autoscaling := slices.Contains(vs.set, "autoscaling.enabled=true")
			if autoscaling {
				wantKinds["ScaledObject"] = 1
			}
			if fmt.Sprint(r.kinds) != fmt.Sprint(wantKinds) {
				t.Errorf("kinds rendered = %v, want %v", r.kinds, wantKinds)
			}
			r.checkSelectors(t)
			if gw := r.deployments["runfleet-gateway"]; gw == nil {
				t.Error("no Deployment runfleet-gateway")
			} else {
				checkGatewayDeployment(t, *gw)
				checkGatewaySecrets(t, *gw)
			}
			checkHelmWorker(t, r, vs.provider, sentinel)
			checkWorkerNetworkPolicy(t, r.netpols["runfleet-worker"], sentinel)
			if monitoring {
				checkMonitoring(t, r)
			}
			checkScaledObject(t, r, autoscaling)
		})
	}
	t.Run("unknown provider", func(t *testing.T) {
		t.Parallel()
		out, err := exec.Command("helm", "template", "runfleet", chartDir, "--set", "provider=gvisor").CombinedOutput()
		if err == nil || !strings.Contains(string(out), `provider "gvisor"`) {
			t.Errorf("helm template with provider=gvisor: %v %s, want it refused naming the provider", err, out)
		}
	})
}

func stderrOf(err error) []byte {
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.Stderr
	}
	return nil
}

// rendered are the documents of one `helm template`, by kind and name.
type rendered struct {
	kinds          map[string]int
	deployments    map[string]*appsv1.Deployment
	statefulsets   map[string]*appsv1.StatefulSet
	services       map[string]*corev1.Service
	pdbs           map[string]*policyv1.PodDisruptionBudget
	netpols        map[string]*networkingv1.NetworkPolicy
	configmaps     map[string]*corev1.ConfigMap
	rules          []*prometheusRule
	serviceMonitor []*serviceMonitor
	scaledObjects  []*scaledObject
}

// serviceMonitor and prometheusRule mirror the fields of prometheus-operator's
// monitoring.coreos.com/v1 types that the chart sets: decoded strictly, a misspelt field fails.
type serviceMonitor struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		JobLabel  string               `json:"jobLabel"`
		Selector  metav1.LabelSelector `json:"selector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Path     string `json:"path"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

type prometheusRule struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

// scaledObject mirrors KEDA's keda.sh/v1alpha1 ScaledObject (its Go type in kedacore/keda, package
// apis/keda/v1alpha1), every field of its spec but fallback and
// scalingModifiers, which the chart does not set: decoded strictly, a misspelt field fails. A
// trigger's metadata is a map there; checkScaledObject holds it to the metrics-api scaler's keys.
type scaledObject struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Spec              struct {
		ScaleTargetRef struct {
			Name                   string `json:"name"`
			APIVersion             string `json:"apiVersion,omitempty"`
			Kind                   string `json:"kind,omitempty"`
			EnvSourceContainerName string `json:"envSourceContainerName,omitempty"`
		} `json:"scaleTargetRef"`
		PollingInterval       *int32 `json:"pollingInterval,omitempty"`
		InitialCooldownPeriod *int32 `json:"initialCooldownPeriod,omitempty"`
		CooldownPeriod        *int32 `json:"cooldownPeriod,omitempty"`
		IdleReplicaCount      *int32 `json:"idleReplicaCount,omitempty"`
		MinReplicaCount       *int32 `json:"minReplicaCount,omitempty"`
		MaxReplicaCount       *int32 `json:"maxReplicaCount,omitempty"`
		Advanced              *struct {
			HorizontalPodAutoscalerConfig *struct {
				Name     string                                         `json:"name,omitempty"`
				Behavior *autoscalingv2.HorizontalPodAutoscalerBehavior `json:"behavior,omitempty"`
			} `json:"horizontalPodAutoscalerConfig,omitempty"`
			RestoreToOriginalReplicaCount bool `json:"restoreToOriginalReplicaCount,omitempty"`
		} `json:"advanced,omitempty"`
		Triggers []struct {
			Type              string                         `json:"type"`
			Name              string                         `json:"name,omitempty"`
			UseCachedMetrics  bool                           `json:"useCachedMetrics,omitempty"`
			Metadata          map[string]string              `json:"metadata"`
			AuthenticationRef *struct{ Name, Kind string }   `json:"authenticationRef,omitempty"`
			MetricType        autoscalingv2.MetricTargetType `json:"metricType,omitempty"`
		} `json:"triggers"`
	} `json:"spec"`
}

// apiVersions are the kinds the chart may render, with their API version.
var apiVersions = map[string]string{
	"Deployment": "apps/v1", "StatefulSet": "apps/v1", "Service": "v1", "ConfigMap": "v1", "ServiceAccount": "v1",
	"PodDisruptionBudget": "policy/v1", "NetworkPolicy": "networking.k8s.io/v1", "Ingress": "networking.k8s.io/v1",
	"ServiceMonitor": "monitoring.coreos.com/v1", "PrometheusRule": "monitoring.coreos.com/v1",
	"ScaledObject": "keda.sh/v1alpha1",
}

func decodeRendered(t *testing.T, out []byte) *rendered {
	t.Helper()
	r := &rendered{kinds: map[string]int{}, deployments: map[string]*appsv1.Deployment{}, statefulsets: map[string]*appsv1.StatefulSet{},
		services: map[string]*corev1.Service{}, pdbs: map[string]*policyv1.PodDisruptionBudget{},
		netpols: map[string]*networkingv1.NetworkPolicy{}, configmaps: map[string]*corev1.ConfigMap{}}
	for doc := range strings.SplitSeq(string(out), "\n---\n") {
		var meta metav1.TypeMeta
		if err := yaml.Unmarshal([]byte(doc), &meta); err != nil {
			t.Fatalf("%v in\n%s", err, doc)
		}
		if meta.Kind == "" {
			continue // comments only
		}
		if want, ok := apiVersions[meta.Kind]; !ok || meta.APIVersion != want {
			t.Errorf("rendered %s %s, want one of %v", meta.APIVersion, meta.Kind, apiVersions)
			continue
		}
		var obj interface{ GetName() string }
		switch meta.Kind {
		case "Deployment":
			obj = &appsv1.Deployment{}
		case "StatefulSet":
			obj = &appsv1.StatefulSet{}
		case "Service":
			obj = &corev1.Service{}
		case "ConfigMap":
			obj = &corev1.ConfigMap{}
		case "ServiceAccount":
			obj = &corev1.ServiceAccount{}
		case "PodDisruptionBudget":
			obj = &policyv1.PodDisruptionBudget{}
		case "NetworkPolicy":
			obj = &networkingv1.NetworkPolicy{}
		case "Ingress":
			obj = &networkingv1.Ingress{}
		case "ServiceMonitor":
			obj = &serviceMonitor{}
		case "PrometheusRule":
			obj = &prometheusRule{}
		case "ScaledObject":
			obj = &scaledObject{}
		}
		if err := decodeStrict([]byte(doc), obj); err != nil {
			t.Errorf("%s: %v in\n%s", meta.Kind, err, doc)
			continue
		}
		r.kinds[meta.Kind]++
		switch o := obj.(type) {
		case *appsv1.Deployment:
			r.deployments[o.Name] = o
		case *appsv1.StatefulSet:
			r.statefulsets[o.Name] = o
		case *corev1.Service:
			r.services[o.Name] = o
		case *policyv1.PodDisruptionBudget:
			r.pdbs[o.Name] = o
		case *networkingv1.NetworkPolicy:
			r.netpols[o.Name] = o
		case *corev1.ConfigMap:
			r.configmaps[o.Name] = o
		case *serviceMonitor:
			r.serviceMonitor = append(r.serviceMonitor, o)
		case *prometheusRule:
			r.rules = append(r.rules, o)
		case *scaledObject:
			r.scaledObjects = append(r.scaledObjects, o)
		}
	}
	return r
}

// checkSelectors: each workload selects its own pods, and every Service, PDB and NetworkPolicy
// selects some workload's pods.
func (r *rendered) checkSelectors(t *testing.T) {
	t.Helper()
	var pods []labels.Set
	check := func(kind, name string, sel *metav1.LabelSelector, own map[string]string) {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || s.Empty() || !s.Matches(labels.Set(own)) {
			t.Errorf("%s %s: selector %v (%v) does not select its pods %v", kind, name, sel, err, own)
		}
		pods = append(pods, own)
	}
	for n, d := range r.deployments {
		check("Deployment", n, d.Spec.Selector, d.Spec.Template.Labels)
	}
	for n, s := range r.statefulsets {
		check("StatefulSet", n, s.Spec.Selector, s.Spec.Template.Labels)
		if _, ok := r.services[s.Spec.ServiceName]; !ok {
			t.Errorf("StatefulSet %s: its Service %q is not rendered", n, s.Spec.ServiceName)
		}
	}
	selectsPods := func(kind, name string, sel *metav1.LabelSelector) {
		s, err := metav1.LabelSelectorAsSelector(sel)
		if err != nil || !slices.ContainsFunc(pods, func(p labels.Set) bool { return s.Matches(p) }) {
			t.Errorf("%s %s: selector %v (%v) selects no pod", kind, name, sel, err)
		}
	}
	for n, s := range r.services {
		selectsPods("Service", n, &metav1.LabelSelector{MatchLabels: s.Spec.Selector})
	}
	for n, p := range r.pdbs {
		selectsPods("PodDisruptionBudget", n, p.Spec.Selector)
	}
	for n, p := range r.netpols {
		selectsPods("NetworkPolicy", n, &p.Spec.PodSelector)
	}
}

// checkGatewaySecrets: both keys come from the Secret, the signing key too, so that an events
// URL one replica signed works on the others behind the Service and the Ingress.
func checkGatewaySecrets(t *testing.T, d appsv1.Deployment) {
	t.Helper()
	for _, name := range []string{"RUNFLEET_API_KEY", "RUNFLEET_SIGNING_KEY"} {
		env := d.Spec.Template.Spec.Containers[0].Env
		i := slices.IndexFunc(env, func(e corev1.EnvVar) bool { return e.Name == name })
		if i < 0 || env[i].ValueFrom == nil || env[i].ValueFrom.SecretKeyRef == nil || env[i].ValueFrom.SecretKeyRef.Name != "runfleet-gateway" {
			t.Errorf("gateway %s: want it from the Secret runfleet-gateway", name)
		}
	}
}

// checkHelmWorker: the provider's permissions and nothing more, the stores' addresses, and a
// drain that outlasts the longest job: --grace covers --max-timeout and the settle budget, and
// the kubelet waits that and another settle budget before its SIGKILL.
func checkHelmWorker(t *testing.T, r *rendered, provider string, sentinel bool) {
	t.Helper()
	d := r.deployments["runfleet-worker"]
	if d == nil {
		t.Fatal("no Deployment runfleet-worker")
	}
	pod := d.Spec.Template.Spec
	c := pod.Containers[0]
	env := map[string]string{}
	for _, e := range c.Env {
		env[e.Name] = e.Value
	}
	settleBudget := runnerSettleBudget(t)
	maxTimeout, err1 := time.ParseDuration(env["RUNFLEET_MAX_TIMEOUT"])
	grace, err2 := time.ParseDuration(env["RUNFLEET_GRACE"])
	if err1 != nil || err2 != nil || pod.TerminationGracePeriodSeconds == nil {
		t.Fatalf("worker: max timeout %v, grace %v, terminationGracePeriodSeconds %v", err1, err2, pod.TerminationGracePeriodSeconds)
	}
	if kubelet := time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second; grace < maxTimeout+settleBudget || kubelet <= grace+settleBudget {
		t.Errorf("worker: --max-timeout %v, --grace %v, terminationGracePeriodSeconds %v: want grace >= max timeout + %v and the pod's past grace + %v",
			maxTimeout, grace, kubelet, settleBudget, settleBudget)
	}
	if env["RUNFLEET_PROVIDER"] != provider {
		t.Errorf("worker provider = %q, want %q", env["RUNFLEET_PROVIDER"], provider)
	}
	for i := range 3 {
		if want := fmt.Sprintf("nats://runfleet-nats-%d.runfleet-nats:4222", i); !strings.Contains(env["RUNFLEET_NATS_URL"], want) {
			t.Errorf("worker NATS URL %q lacks %s", env["RUNFLEET_NATS_URL"], want)
		}
	}
	wantRedis := "redis://runfleet-redis:6379/0"
	if sentinel {
		wantRedis = "redis+sentinel://runfleet-sentinel-0.runfleet-sentinel:26379,runfleet-sentinel-1.runfleet-sentinel:26379,runfleet-sentinel-2.runfleet-sentinel:26379/runfleet"
	}
	if env["RUNFLEET_REDIS_URL"] != wantRedis {
		t.Errorf("worker Redis URL = %q, want %q", env["RUNFLEET_REDIS_URL"], wantRedis)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("worker pod mounts a service account token: sandboxed code that got out would hold it")
	}
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.HostPath.Path] = v.Name
		}
	}
	mounted := func(path string) bool {
		return slices.ContainsFunc(c.VolumeMounts, func(m corev1.VolumeMount) bool {
			return m.Name == hostPaths[path] && m.MountPath == path
		})
	}
	sc := c.SecurityContext
	switch provider {
	case "namespace":
		if !pod.HostPID || !mounted("/sys/fs/cgroup") || !mounted("/run/runfleet") || sc == nil || sc.Capabilities == nil ||
			!slices.Contains(sc.Capabilities.Add, "SYS_ADMIN") || !slices.Contains(sc.Capabilities.Add, "NET_ADMIN") {
			t.Errorf("namespace worker: hostPID %v, host paths %v, security context %+v: want the node's pid namespace, cgroup tree, uid locks, SYS_ADMIN and NET_ADMIN",
				pod.HostPID, hostPaths, sc)
		}
	case "docker":
		if pod.HostPID || len(hostPaths) != 1 || !mounted("/var/run/docker.sock") || env["RUNFLEET_IMAGE"] == "" ||
			sc == nil || sc.Capabilities == nil || len(sc.Capabilities.Add) > 0 || !slices.Contains(sc.Capabilities.Drop, "ALL") {
			t.Errorf("docker worker: hostPID %v, host paths %v, image %q, security context %+v: want the node's Docker socket, a sandbox image and no capability",
				pod.HostPID, hostPaths, env["RUNFLEET_IMAGE"], sc)
		}
	}
	if probe := c.ReadinessProbe; probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != "/readyz" || env["RUNFLEET_LISTEN"] != "0.0.0.0:9464" {
		t.Errorf("worker readiness probe %+v on listen %q: want /readyz on 9464", probe, env["RUNFLEET_LISTEN"])
	}
}

// runnerSettleBudget is the runner's default settle budget (runner.Options.SettleWait), which the
// chart's worker.settleBudget repeats.
func runnerSettleBudget(t *testing.T) time.Duration {
	t.Helper()
	b, err := os.ReadFile("../internal/runner/runner.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`o\.SettleWait = cmp\.Or\(o\.SettleWait, (\d+)\s*\*\s*time\.Second\)`).FindSubmatch(b)
	if m == nil {
		t.Fatal("internal/runner/runner.go: no default SettleWait in seconds: has its declaration changed?")
	}
	n, _ := strconv.Atoi(string(m[1]))
	return time.Duration(n) * time.Second
}

// checkWorkerNetworkPolicy: the workers reach NATS, Redis (and its Sentinels) and DNS, nothing
// else: no rule open to every destination, no address block.
func checkWorkerNetworkPolicy(t *testing.T, p *networkingv1.NetworkPolicy, sentinel bool) {
	t.Helper()
	if p == nil {
		t.Fatal("no NetworkPolicy runfleet-worker")
	}
	if !slices.Contains(p.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
		t.Errorf("worker NetworkPolicy does not restrict egress")
	}
	var reached []string
	for _, rule := range p.Spec.Egress {
		if len(rule.To) == 0 || len(rule.Ports) == 0 {
			t.Errorf("worker egress rule %+v is open to every destination or port", rule)
		}
		for _, peer := range rule.To {
			switch {
			case peer.IPBlock != nil || peer.PodSelector == nil:
				t.Errorf("worker egress peer %+v: want pods only", peer)
			case peer.NamespaceSelector != nil:
				if peer.PodSelector.MatchLabels["k8s-app"] != "kube-dns" || slices.ContainsFunc(rule.Ports, func(port networkingv1.NetworkPolicyPort) bool { return port.Port.IntValue() != 53 }) {
					t.Errorf("worker egress to another namespace %+v: want DNS only", rule)
				}
				reached = append(reached, "dns")
			default:
				reached = append(reached, peer.PodSelector.MatchLabels["app.kubernetes.io/component"])
			}
		}
	}
	want := []string{"nats", "redis", "dns"}
	if sentinel {
		want = []string{"nats", "redis", "sentinel", "dns"}
	}
	if !slices.Equal(reached, want) {
		t.Errorf("worker egress reaches %v, want %v", reached, want)
	}
}

// metricsAPIKeys are the metadata KEDA's metrics-api scaler reads (keda.sh/docs, "Metrics API").
var metricsAPIKeys = map[string]bool{"url": true, "format": true, "valueLocation": true, "targetValue": true,
	"activationTargetValue": true, "authMode": true, "unsafeSsl": true}

// checkScaledObject: with autoscaling, KEDA scales the worker Deployment from zero on the
// gateway's backlog, one metrics-api trigger per queue, whose URL is the gateway Service's
// key-less metrics port and whose valueLocation is a field GET /v1/backlog answers; the chart
// leaves the Deployment's replicas to KEDA and lets KEDA's namespace reach the port. Without it,
// no ScaledObject and the chart's replicas.
func checkScaledObject(t *testing.T, r *rendered, autoscaling bool) {
	t.Helper()
	worker := r.deployments["runfleet-worker"]
	if !autoscaling {
		if len(r.scaledObjects) != 0 || worker == nil || worker.Spec.Replicas == nil {
			t.Errorf("without autoscaling: %d ScaledObjects, worker replicas %v; want none and the chart's", len(r.scaledObjects), worker.Spec.Replicas)
		}
		return
	}
	if len(r.scaledObjects) != 1 {
		t.Fatalf("%d ScaledObjects, want 1", len(r.scaledObjects))
	}
	so := r.scaledObjects[0].Spec
	if worker == nil || so.ScaleTargetRef.Name != worker.Name || worker.Spec.Replicas != nil {
		t.Errorf("ScaledObject targets %q; worker %v with replicas %v: want the worker Deployment, its replicas left to KEDA", so.ScaleTargetRef.Name, worker != nil, worker.Spec.Replicas)
	}
	if so.MinReplicaCount == nil || *so.MinReplicaCount != 0 || so.MaxReplicaCount == nil || *so.MaxReplicaCount != 20 {
		t.Errorf("ScaledObject replicas %v to %v, want 0 to 20", so.MinReplicaCount, so.MaxReplicaCount)
	}
	answer, err := json.Marshal(backlog.Answer{})
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	json.Unmarshal(answer, &fields)
	gw := r.services["runfleet-gateway"]
	var queues []string
	for _, tr := range so.Triggers {
		for k := range tr.Metadata {
			if !metricsAPIKeys[k] {
				t.Errorf("metrics-api trigger metadata %q: not one the scaler reads (%v)", k, metricsAPIKeys)
			}
		}
		u, err := url.Parse(tr.Metadata["url"])
		if tr.Type != "metrics-api" || tr.MetricType != autoscalingv2.AverageValueMetricType || err != nil {
			t.Errorf("trigger %s %s url %q (%v): want metrics-api, AverageValue", tr.Type, tr.MetricType, tr.Metadata["url"], err)
			continue
		}
		port := slices.IndexFunc(gw.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "metrics" && strconv.Itoa(int(p.Port)) == u.Port() })
		if u.Hostname() != "runfleet-gateway.runfleet.svc" || port < 0 || u.Path != "/v1/backlog" {
			t.Errorf("trigger url %s: want the gateway Service's metrics port, /v1/backlog", u)
		}
		queues = append(queues, u.Query().Get("queue"))
		if _, ok := fields[tr.Metadata["valueLocation"]]; !ok || tr.Metadata["format"] != "json" {
			t.Errorf("trigger valueLocation %q format %q: want a field of GET /v1/backlog's JSON %s", tr.Metadata["valueLocation"], tr.Metadata["format"], answer)
		}
		if n, err := strconv.Atoi(tr.Metadata["targetValue"]); err != nil || n < 1 {
			t.Errorf("trigger targetValue %q: want a count of jobs per worker", tr.Metadata["targetValue"])
		}
	}
	if !slices.Equal(queues, []string{"default", "gpu"}) {
		t.Errorf("triggers on queues %v, want default and gpu", queues)
	}
	var reached bool
	for _, rule := range r.netpols["runfleet-gateway"].Spec.Ingress {
		for _, peer := range rule.From {
			if peer.NamespaceSelector != nil && peer.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] == "keda" &&
				len(rule.Ports) == 1 && rule.Ports[0].Port.IntValue() == 9465 {
				reached = true
			}
		}
	}
	if !reached {
		t.Errorf("gateway NetworkPolicy does not let KEDA's namespace reach the metrics port")
	}
}

// checkMonitoring: both scrape targets are monitored, and the dashboard and alert rules name
// only metrics the fleet exports.
func checkMonitoring(t *testing.T, r *rendered) {
	t.Helper()
	var ports []string
	for _, sm := range r.serviceMonitor {
		for _, e := range sm.Spec.Endpoints {
			ports = append(ports, e.Port)
		}
		if sm.Labels["release"] != "prometheus" {
			t.Errorf("ServiceMonitor %s labels %v lack monitoring.labels", sm.Name, sm.Labels)
		}
	}
	if slices.Sort(ports); !slices.Equal(ports, []string{"http", "metrics"}) {
		t.Errorf("ServiceMonitor ports = %v, want the worker's http and the gateway's metrics", ports)
	}
	exported := exportedMetrics(t)
	var alerts int
	for _, pr := range r.rules {
		for _, g := range pr.Spec.Groups {
			for _, rule := range g.Rules {
				alerts++
				checkExpr(t, "alert "+rule.Alert, rule.Expr, exported)
			}
		}
	}
	if alerts == 0 {
		t.Errorf("PrometheusRule has no rule")
	}
	file, err := os.ReadFile(chartDir + "/files/dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	cm := r.configmaps["runfleet-dashboard"]
	if cm == nil || strings.TrimSpace(cm.Data["runfleet.json"]) != strings.TrimSpace(string(file)) {
		t.Errorf("dashboard ConfigMap does not hold files/dashboard.json")
	}
	var dashboard struct {
		Panels []struct {
			Title   string
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(file, &dashboard); err != nil {
		t.Fatalf("files/dashboard.json: %v", err)
	}
	var queries int
	for _, p := range dashboard.Panels {
		for _, q := range p.Targets {
			queries++
			checkExpr(t, "panel "+p.Title, q.Expr, exported)
		}
	}
	if queries == 0 {
		t.Errorf("dashboard has no query")
	}
}

func checkExpr(t *testing.T, where, expr string, exported map[string]bool) {
	t.Helper()
	names := promMetrics(expr)
	if len(names) == 0 {
		t.Errorf("%s: %q names no metric", where, expr)
	}
	for _, name := range names {
		if !exported[name] && !strings.HasPrefix(name, "go_") && !strings.HasPrefix(name, "process_") && name != "up" {
			t.Errorf("%s: %q names %s, which the fleet does not export", where, expr, name)
		}
	}
}

// exportedMetrics are the series the worker and the gateway register (the backlog's as the
// descriptions of its collector), read from their sources:
// a histogram's as Prometheus exposes them (_bucket, _sum, _count).
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	opts := regexp.MustCompile(`(Counter|Gauge|Histogram)Opts\{Name:\s*"(runfleet_\w+)"|(NewDesc)\(\s*"(runfleet_\w+)"`)
	m := map[string]bool{}
	for _, f := range []string{"../internal/metrics/metrics.go", "../internal/gateway/metrics.go", "../internal/backlog/collector.go"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range opts.FindAllStringSubmatch(string(b), -1) {
			if g[3] != "" { // a collector's own series, gauges
				g = []string{"", g[3], g[4]}
			}
			m[g[2]] = true
			if g[1] == "Histogram" {
				m[g[2]+"_bucket"], m[g[2]+"_sum"], m[g[2]+"_count"] = true, true, true
			}
		}
	}
	if len(m) < 20 {
		t.Fatalf("found %d metrics in the sources: has their declaration changed?", len(m))
	}
	return m
}

// promKeywords are PromQL's words that are not metric names; those that take a list of labels
// in parentheses are true. Aggregations are listed because a grouping may stand between them
// and their parentheses (sum by (le) (…)).
var promKeywords = map[string]bool{
	"by": true, "without": true, "on": true, "ignoring": true, "group_left": true, "group_right": true,
	"and": false, "or": false, "unless": false, "bool": false, "offset": false, "inf": false, "nan": false,
	"sum": false, "min": false, "max": false, "avg": false, "group": false, "stddev": false, "stdvar": false,
	"count": false, "count_values": false, "bottomk": false, "topk": false, "quantile": false,
}

// promMetrics returns the metric names a PromQL expression selects: identifiers outside label
// matchers, ranges, strings and grouping lists that are not calls or keywords.
func promMetrics(expr string) []string {
	var names []string
	isStart := func(c byte) bool { return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
	isPart := func(c byte) bool { return isStart(c) || c >= '0' && c <= '9' }
	skipTo := func(i int, end byte) int {
		for i < len(expr) && expr[i] != end {
			if q := expr[i]; q == '"' || q == '\'' || q == '`' {
				i++
				for i < len(expr) && expr[i] != q {
					if expr[i] == '\\' {
						i++
					}
					i++
				}
			}
			i++
		}
		return i
	}
	nextNonSpace := func(i int) int {
		for i < len(expr) && (expr[i] == ' ' || expr[i] == '\n' || expr[i] == '\t') {
			i++
		}
		return i
	}
	for i := 0; i < len(expr); {
		c := expr[i]
		switch {
		case c == '{':
			i = skipTo(i, '}') + 1
		case c == '[':
			i = skipTo(i, ']') + 1
		case c == '"' || c == '\'' || c == '`':
			i = skipTo(i+1, c) + 1
		case c >= '0' && c <= '9' || c == '.':
			for i < len(expr) && (isPart(expr[i]) || expr[i] == '.') {
				i++
			}
		case isStart(c):
			j := i
			for j < len(expr) && isPart(expr[j]) {
				j++
			}
			word, next := expr[i:j], nextNonSpace(j)
			grouping, keyword := promKeywords[strings.ToLower(word)]
			switch {
			case grouping && next < len(expr) && expr[next] == '(':
				j = skipTo(next, ')') + 1
			case keyword:
			case next < len(expr) && expr[next] == '(':
			default:
				names = append(names, word)
			}
			i = j
		default:
			i++
		}
	}
	return names
}

func TestPromMetrics(t *testing.T) {
	for _, tt := range []struct{ expr, want string }{
		{`up{job="worker"} == 0`, "up"},
		{`histogram_quantile(0.95, sum by (queue, le) (rate(a_bucket{queue=~"$q"}[$__rate_interval])))`, "a_bucket"},
		{`sum(rate(a_total{code=~"5.."}[10m])) > 0.05 * sum without (x) (b) and on(y) c offset 5m`, "a_total b c"},
		{`count by (version, goversion) (runfleet_build_info)`, "runfleet_build_info"},
	} {
		if got := strings.Join(promMetrics(tt.expr), " "); got != tt.want {
			t.Errorf("promMetrics(%q) = %q, want %q", tt.expr, got, tt.want)
		}
	}
}
