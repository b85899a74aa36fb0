package kubernetes_test

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/tetherhq/tether/services/nats/natsauth"
	"github.com/tetherhq/tether/services/testkit/tethercli"
)

const (
	// tetherCmdDir is the tether binary's source, relative to this package.
	tetherCmdDir = "../../services/cmd/tether"
	namespace    = "tether"
	image        = "ghcr.io/tetherhq/tether:latest"
	adminPort    = 7090
	runAsUser    = 65532
)

// base is the kustomize base, rendered and decoded.
type base struct {
	deployments     []appsv1.Deployment
	services        []corev1.Service
	configMaps      []corev1.ConfigMap
	secrets         []corev1.Secret
	serviceAccounts []corev1.ServiceAccount
	namespaces      []corev1.Namespace
	jobs            []batchv1.Job
	pdbs            []policyv1.PodDisruptionBudget
	netpols         []networkingv1.NetworkPolicy
}

// workload is a pod template and what owns it, for the checks every Tether
// pod must pass.
type workload struct {
	name string
	spec corev1.PodSpec
	meta metav1.ObjectMeta
}

// renderBase runs `kubectl kustomize` on this directory and decodes every
// object strictly (an unknown field or kind fails). Without kubectl the
// test is skipped, unless TETHER_REQUIRE_KUBECTL=1 (CI) makes it fail.
func renderBase(t *testing.T) base {
	t.Helper()
	kubectl, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("TETHER_REQUIRE_KUBECTL") == "1" {
			t.Fatalf("kubectl not found (%v) and TETHER_REQUIRE_KUBECTL=1: install it (apt-get install kubectl, or Debian's own kubernetes-client)", err)
		}
		t.Skipf("kubectl not found (%v): the kustomize base is not checked (TETHER_REQUIRE_KUBECTL=1 makes this fail)", err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), kubectl, "kustomize", ".")
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kubectl kustomize deploy/kubernetes: %v\n%s", err, stderr.String())
	}
	var b base
	for i, doc := range splitYAML(out) {
		if err := b.add(doc); err != nil {
			t.Fatalf("object %d of the rendered base: %v\n%s", i, err, doc)
		}
	}
	return b
}

// splitYAML splits a stream of YAML documents, dropping empty ones.
func splitYAML(data []byte) [][]byte {
	var docs [][]byte
	for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(data), -1) {
		if strings.TrimSpace(doc) != "" {
			docs = append(docs, []byte(doc))
		}
	}
	return docs
}

// add decodes one object into the API type of its kind, refusing fields
// the type does not have.
func (b *base) add(doc []byte) error {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	key := tm.APIVersion + " " + tm.Kind
	var err error
	switch key {
	case "apps/v1 Deployment":
		b.deployments, err = decodeInto(doc, b.deployments)
	case "v1 Service":
		b.services, err = decodeInto(doc, b.services)
	case "v1 ConfigMap":
		b.configMaps, err = decodeInto(doc, b.configMaps)
	case "v1 Secret":
		b.secrets, err = decodeInto(doc, b.secrets)
	case "v1 ServiceAccount":
		b.serviceAccounts, err = decodeInto(doc, b.serviceAccounts)
	case "v1 Namespace":
		b.namespaces, err = decodeInto(doc, b.namespaces)
	case "batch/v1 Job":
		b.jobs, err = decodeInto(doc, b.jobs)
	case "policy/v1 PodDisruptionBudget":
		b.pdbs, err = decodeInto(doc, b.pdbs)
	case "networking.k8s.io/v1 NetworkPolicy":
		b.netpols, err = decodeInto(doc, b.netpols)
	default:
		return fmt.Errorf("kind %q: the base holds no such kind (add it to this test to allow it)", key)
	}
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// decodeInto decodes doc strictly into a new T and appends it.
func decodeInto[T any](doc []byte, to []T) ([]T, error) {
	var v T
	if err := yaml.UnmarshalStrict(doc, &v); err != nil {
		return to, err
	}
	return append(to, v), nil
}

// workloads are the pod templates of the Deployments and the Job.
func (b base) workloads() []workload {
	var ws []workload
	for _, d := range b.deployments {
		ws = append(ws, workload{"Deployment " + d.Name, d.Spec.Template.Spec, d.Spec.Template.ObjectMeta})
	}
	for _, j := range b.jobs {
		ws = append(ws, workload{"Job " + j.Name, j.Spec.Template.Spec, j.Spec.Template.ObjectMeta})
	}
	return ws
}

func (b base) deployment(t *testing.T, name string) appsv1.Deployment {
	t.Helper()
	for _, d := range b.deployments {
		if d.Name == name {
			return d
		}
	}
	t.Fatalf("no Deployment %q", name)
	return appsv1.Deployment{}
}

func TestObjectsAreInTheNamespace(t *testing.T) {
	b := renderBase(t)
	metas := map[string]metav1.ObjectMeta{}
	for _, d := range b.deployments {
		metas["Deployment "+d.Name] = d.ObjectMeta
	}
	for _, s := range b.services {
		metas["Service "+s.Name] = s.ObjectMeta
	}
	for _, c := range b.configMaps {
		metas["ConfigMap "+c.Name] = c.ObjectMeta
	}
	for _, j := range b.jobs {
		metas["Job "+j.Name] = j.ObjectMeta
	}
	for _, p := range b.pdbs {
		metas["PodDisruptionBudget "+p.Name] = p.ObjectMeta
	}
	for _, n := range b.netpols {
		metas["NetworkPolicy "+n.Name] = n.ObjectMeta
	}
	for _, s := range b.serviceAccounts {
		metas["ServiceAccount "+s.Name] = s.ObjectMeta
	}
	for _, w := range b.workloads() {
		metas[w.name+" pod template"] = w.meta
	}
	for what, m := range metas {
		if m.Namespace != namespace && !strings.HasSuffix(what, " pod template") {
			t.Errorf("%s: namespace %q, want %q", what, m.Namespace, namespace)
		}
		if m.Labels["app.kubernetes.io/part-of"] != "tether" {
			t.Errorf("%s: no label app.kubernetes.io/part-of=tether", what)
		}
	}
	if len(b.namespaces) != 1 || b.namespaces[0].Name != namespace {
		t.Errorf("namespaces %v, want exactly %q", b.namespaces, namespace)
	}
	if len(b.secrets) != 0 {
		t.Errorf("the base holds %d Secret(s): secrets are created by the user or the operator, never committed", len(b.secrets))
	}
}

// TestSetupSelector checks the label selector README.md applies before the
// services ("setup=…"): the migrate Job and all it needs, none of the
// services.
func TestSetupSelector(t *testing.T) {
	b := renderBase(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`setup='([^']+)'`).FindSubmatch(readme)
	if m == nil {
		t.Fatal("README.md has no setup='…' selector")
	}
	sel, err := labels.Parse(string(m[1]))
	if err != nil {
		t.Fatalf("README.md's setup selector %q: %v", m[1], err)
	}
	check := func(what string, objLabels map[string]string, want bool) {
		if got := sel.Matches(labels.Set(objLabels)); got != want {
			t.Errorf("README.md's setup selector selects %s: %v, want %v", what, got, want)
		}
	}
	for _, j := range b.jobs {
		check("Job "+j.Name, j.Labels, true)
	}
	for _, c := range b.configMaps {
		check("ConfigMap "+c.Name, c.Labels, true)
	}
	for _, sa := range b.serviceAccounts {
		check("ServiceAccount "+sa.Name, sa.Labels, true)
	}
	for _, n := range b.netpols {
		check("NetworkPolicy "+n.Name, n.Labels, true)
	}
	for _, d := range b.deployments {
		check("Deployment "+d.Name, d.Labels, false)
	}
	for _, p := range b.pdbs {
		check("PodDisruptionBudget "+p.Name, p.Labels, false)
	}
	for _, svc := range b.services {
		check("Service "+svc.Name, svc.Labels, false)
	}
}

func TestReplicas(t *testing.T) {
	b := renderBase(t)
	for name, want := range map[string]int32{"tether-apiserver": 2, "tether-projector": 2, "tether-controller": 2} {
		d := b.deployment(t, name)
		if d.Spec.Replicas == nil || *d.Spec.Replicas != want {
			t.Errorf("%s: replicas %v, want %d", name, d.Spec.Replicas, want)
		}
	}
	if len(b.deployments) != 3 {
		t.Errorf("%d Deployments, want 3 (apiserver, projector, controller)", len(b.deployments))
	}
}

// TestPodsAreHardened checks every container of every Deployment and Job:
// non-root 65532, read-only root, no privilege escalation, no capabilities,
// RuntimeDefault seccomp, requests and limits, the image kustomize sets.
func TestPodsAreHardened(t *testing.T) {
	b := renderBase(t)
	for _, w := range b.workloads() {
		if w.spec.AutomountServiceAccountToken == nil || *w.spec.AutomountServiceAccountToken {
			t.Errorf("%s: mounts a service account token; Tether calls no Kubernetes API", w.name)
		}
		if !slices.ContainsFunc(b.serviceAccounts, func(sa corev1.ServiceAccount) bool { return sa.Name == w.spec.ServiceAccountName }) {
			t.Errorf("%s: service account %q is not in the base", w.name, w.spec.ServiceAccountName)
		}
		if len(w.spec.InitContainers) != 0 {
			t.Errorf("%s: init containers are not checked by this test", w.name)
		}
		for _, c := range w.spec.Containers {
			where := w.name + " container " + c.Name
			if c.Image != image {
				t.Errorf("%s: image %q, want %q (kustomization.yaml images:)", where, c.Image, image)
			}
			checkSecurityContext(t, where, w.spec.SecurityContext, c.SecurityContext)
			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, lim := c.Resources.Requests[res], c.Resources.Limits[res]
				if req.IsZero() || lim.IsZero() {
					t.Errorf("%s: %s request %q and limit %q, want both", where, res, req.String(), lim.String())
				} else if req.Cmp(lim) > 0 {
					t.Errorf("%s: %s request %s above its limit %s", where, res, req.String(), lim.String())
				}
			}
		}
	}
}

// checkSecurityContext checks a container's effective security settings:
// its own, else its pod's.
func checkSecurityContext(t *testing.T, where string, pod *corev1.PodSecurityContext, c *corev1.SecurityContext) {
	t.Helper()
	if pod == nil {
		pod = &corev1.PodSecurityContext{}
	}
	if c == nil {
		c = &corev1.SecurityContext{}
	}
	nonRoot := c.RunAsNonRoot
	if nonRoot == nil {
		nonRoot = pod.RunAsNonRoot
	}
	if nonRoot == nil || !*nonRoot {
		t.Errorf("%s: runAsNonRoot is not true", where)
	}
	user := c.RunAsUser
	if user == nil {
		user = pod.RunAsUser
	}
	if user == nil || *user != runAsUser {
		t.Errorf("%s: runAsUser %v, want %d (the image's user tether)", where, user, runAsUser)
	}
	if c.ReadOnlyRootFilesystem == nil || !*c.ReadOnlyRootFilesystem {
		t.Errorf("%s: readOnlyRootFilesystem is not true", where)
	}
	if c.AllowPrivilegeEscalation == nil || *c.AllowPrivilegeEscalation {
		t.Errorf("%s: allowPrivilegeEscalation is not false", where)
	}
	if c.Privileged != nil && *c.Privileged {
		t.Errorf("%s: privileged", where)
	}
	if c.Capabilities == nil || !slices.Equal(c.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(c.Capabilities.Add) != 0 {
		t.Errorf("%s: capabilities %+v, want drop [ALL] and add none", where, c.Capabilities)
	}
	seccomp := c.SeccompProfile
	if seccomp == nil {
		seccomp = pod.SeccompProfile
	}
	if seccomp == nil || seccomp.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: seccompProfile %+v, want RuntimeDefault", where, seccomp)
	}
}

// TestProbes checks that each Deployment's containers serve the admin
// endpoints on port "admin" (7090, the --admin-addr they are given) and are
// probed there: liveness /healthz, readiness /readyz.
func TestProbes(t *testing.T) {
	b := renderBase(t)
	for _, d := range b.deployments {
		for _, c := range d.Spec.Template.Spec.Containers {
			where := "Deployment " + d.Name + " container " + c.Name
			port, ok := containerPort(c, intstr.FromString("admin"))
			if !ok || port != adminPort {
				t.Errorf("%s: container port \"admin\" is %d (found %v), want %d", where, port, ok, adminPort)
			}
			if !slices.Contains(c.Args, fmt.Sprintf("--admin-addr=:%d", adminPort)) {
				t.Errorf("%s: args %q do not serve the admin endpoints on :%d (--admin-addr)", where, c.Args, adminPort)
			}
			checkProbe(t, where+" liveness", c, c.LivenessProbe, "/healthz")
			checkProbe(t, where+" readiness", c, c.ReadinessProbe, "/readyz")
		}
	}
}

func checkProbe(t *testing.T, where string, c corev1.Container, p *corev1.Probe, path string) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: no HTTP probe", where)
		return
	}
	if p.HTTPGet.Path != path {
		t.Errorf("%s: path %q, want %q", where, p.HTTPGet.Path, path)
	}
	if port, ok := containerPort(c, p.HTTPGet.Port); !ok || port != adminPort {
		t.Errorf("%s: port %s is not the admin port %d", where, p.HTTPGet.Port.String(), adminPort)
	}
}

// containerPort resolves a port by number or name among c's ports.
func containerPort(c corev1.Container, p intstr.IntOrString) (int32, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp.ContainerPort, true
		}
	}
	return 0, false
}

func TestEveryDeploymentHasADisruptionBudget(t *testing.T) {
	b := renderBase(t)
	for _, d := range b.deployments {
		podLabels := labels.Set(d.Spec.Template.Labels)
		sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
		if err != nil {
			t.Fatalf("Deployment %s: selector: %v", d.Name, err)
		}
		if !sel.Matches(podLabels) {
			t.Errorf("Deployment %s: its selector %s does not match its pods' labels %v", d.Name, sel, podLabels)
		}
		var covering []string
		for _, p := range b.pdbs {
			ps, err := metav1.LabelSelectorAsSelector(p.Spec.Selector)
			if err != nil {
				t.Fatalf("PodDisruptionBudget %s: selector: %v", p.Name, err)
			}
			if !ps.Empty() && ps.Matches(podLabels) {
				covering = append(covering, p.Name)
				if p.Spec.MinAvailable == nil || *p.Spec.MinAvailable != intstr.FromInt32(1) {
					t.Errorf("PodDisruptionBudget %s: minAvailable %v, want 1", p.Name, p.Spec.MinAvailable)
				}
			}
		}
		if len(covering) != 1 {
			t.Errorf("Deployment %s: %d PodDisruptionBudgets select its pods (%v), want 1", d.Name, len(covering), covering)
		}
	}
}

func TestServiceSelectsTheAPI(t *testing.T) {
	b := renderBase(t)
	if len(b.services) != 1 {
		t.Fatalf("%d Services, want 1 (tether-apiserver)", len(b.services))
	}
	svc := b.services[0]
	sel := labels.SelectorFromSet(svc.Spec.Selector)
	if len(svc.Spec.Selector) == 0 {
		t.Fatalf("Service %s has no selector", svc.Name)
	}
	for _, d := range b.deployments {
		matches := sel.Matches(labels.Set(d.Spec.Template.Labels))
		if want := d.Name == "tether-apiserver"; matches != want {
			t.Errorf("Service %s selects Deployment %s's pods: %v, want %v", svc.Name, d.Name, matches, want)
		}
	}
	api := b.deployment(t, "tether-apiserver").Spec.Template.Spec.Containers[0]
	want := map[string]int32{"grpc": 9090, "http": 8080, "admin": adminPort}
	if len(svc.Spec.Ports) != len(want) {
		t.Errorf("Service %s: ports %+v, want %v", svc.Name, svc.Spec.Ports, want)
	}
	for _, p := range svc.Spec.Ports {
		if want[p.Name] != p.Port {
			t.Errorf("Service %s: port %s is %d, want %d", svc.Name, p.Name, p.Port, want[p.Name])
		}
		if target, ok := containerPort(api, p.TargetPort); !ok || target != p.Port {
			t.Errorf("Service %s: port %s targets %s, which the API container serves on %d (found %v)", svc.Name, p.Name, p.TargetPort.String(), target, ok)
		}
	}
	if !slices.Contains(api.Args, "--grpc-addr=:9090") || !slices.Contains(api.Args, "--http-addr=:8080") {
		t.Errorf("API args %q do not listen on :9090 (gRPC) and :8080 (REST) on every interface", api.Args)
	}
}

func TestMigrateJob(t *testing.T) {
	b := renderBase(t)
	if len(b.jobs) != 1 {
		t.Fatalf("%d Jobs, want 1 (tether-migrate)", len(b.jobs))
	}
	j := b.jobs[0]
	args := j.Spec.Template.Spec.Containers[0].Args
	if len(args) == 0 || args[0] != "migrate" || !slices.Contains(args, "--stream-replicas=3") {
		t.Errorf("Job %s: args %q, want migrate --stream-replicas=3", j.Name, args)
	}
	if rp := j.Spec.Template.Spec.RestartPolicy; rp != corev1.RestartPolicyNever && rp != corev1.RestartPolicyOnFailure {
		t.Errorf("Job %s: restartPolicy %q", j.Name, rp)
	}
}

// TestCommandsFlagsAndEnvironment checks every container against the tether
// binary's source: its subcommand exists, takes each --flag it is given,
// and each TETHER_ variable it gets (from env or the ConfigMap) names a
// flag of that subcommand; the secrets are the documented ones.
func TestCommandsFlagsAndEnvironment(t *testing.T) {
	b := renderBase(t)
	cli := tethercli.Read(t, tetherCmdDir)
	configMaps := map[string]map[string]string{}
	for _, cm := range b.configMaps {
		configMaps[cm.Name] = cm.Data
	}
	secretRefs := map[string]string{
		"DATABASE_URL":             "tether-pg-app/uri",
		"TETHER_PLAYER_TOKEN_KEYS": "tether-player-token-keys/keys",
	}
	for _, w := range b.workloads() {
		for _, c := range w.spec.Containers {
			where := w.name + " container " + c.Name
			if len(c.Command) != 0 {
				t.Errorf("%s: command %q overrides the image's entrypoint", where, c.Command)
			}
			cli.CheckArgs(t, where, c.Args)
			if len(c.Args) == 0 {
				continue
			}
			cmd := c.Args[0]
			vars := map[string]bool{}
			for _, from := range c.EnvFrom {
				if from.ConfigMapRef == nil {
					t.Errorf("%s: envFrom %+v: only ConfigMaps", where, from)
					continue
				}
				data, ok := configMaps[from.ConfigMapRef.Name]
				if !ok {
					t.Errorf("%s: ConfigMap %q is not in the base", where, from.ConfigMapRef.Name)
				}
				for k := range data {
					vars[k] = true
				}
			}
			for _, e := range c.Env {
				vars[e.Name] = true
				want, secret := secretRefs[e.Name]
				ref := e.ValueFrom
				switch {
				case secret && (ref == nil || ref.SecretKeyRef == nil):
					t.Errorf("%s: %s must come from the secret %s", where, e.Name, want)
				case secret:
					if got := ref.SecretKeyRef.Name + "/" + ref.SecretKeyRef.Key; got != want {
						t.Errorf("%s: %s from secret %s, want %s", where, e.Name, got, want)
					}
				case ref != nil && ref.SecretKeyRef != nil:
					t.Errorf("%s: %s comes from secret %s, which is not documented", where, e.Name, ref.SecretKeyRef.Name)
				}
			}
			for v := range vars {
				if flag, ok := tethercli.FlagOfEnv(v); ok && !cli.HasFlag(cmd, flag) {
					t.Errorf("%s: %s sets --%s, which tether %s does not have: it would be ignored", where, v, flag, cmd)
				}
			}
			for _, v := range []string{"NATS_URL", "DATABASE_URL"} {
				if !vars[v] {
					t.Errorf("%s: no %s", where, v)
				}
			}
			if cmd == "apiserver" && !vars["TETHER_PLAYER_TOKEN_KEYS"] {
				t.Errorf("%s: no TETHER_PLAYER_TOKEN_KEYS: the API refuses to start without it", where)
			}
		}
	}
	nats := configMaps["tether-config"]["NATS_URL"]
	if !strings.HasPrefix(nats, "nats://nats."+namespace+".svc") {
		t.Errorf("NATS_URL %q is not the NATS chart's Service in the namespace", nats)
	}
}

func TestNetworkPolicies(t *testing.T) {
	b := renderBase(t)
	byName := map[string]networkingv1.NetworkPolicy{}
	for _, n := range b.netpols {
		byName[n.Name] = n
	}
	deny, ok := byName["default-deny-ingress"]
	if !ok || len(deny.Spec.PodSelector.MatchLabels)+len(deny.Spec.PodSelector.MatchExpressions) != 0 ||
		!slices.Equal(deny.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) || len(deny.Spec.Ingress) != 0 {
		t.Errorf("no default-deny-ingress policy over every pod: %+v", deny.Spec)
	}
	api := b.deployment(t, "tether-apiserver").Spec.Template.Labels
	projector := b.deployment(t, "tether-projector").Spec.Template.Labels
	// Which ports each pod accepts, and from whom ("*" anyone, else the
	// namespace selected).
	ingress := func(podLabels map[string]string) map[int32][]string {
		got := map[int32][]string{}
		for _, n := range b.netpols {
			sel, err := metav1.LabelSelectorAsSelector(&n.Spec.PodSelector)
			if err != nil {
				t.Fatalf("NetworkPolicy %s: %v", n.Name, err)
			}
			if !sel.Matches(labels.Set(podLabels)) {
				continue
			}
			for _, rule := range n.Spec.Ingress {
				for _, p := range rule.Ports {
					if p.Port == nil {
						t.Errorf("NetworkPolicy %s: a rule for every port", n.Name)
						continue
					}
					if len(rule.From) == 0 {
						got[p.Port.IntVal] = append(got[p.Port.IntVal], "*")
					}
					for _, from := range rule.From {
						if from.NamespaceSelector != nil {
							got[p.Port.IntVal] = append(got[p.Port.IntVal], from.NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"])
						}
					}
				}
			}
		}
		return got
	}
	apiIn := ingress(api)
	for _, port := range []int32{9090, 8080} {
		if !slices.Contains(apiIn[port], "*") {
			t.Errorf("API port %d is not open to everyone: %v", port, apiIn)
		}
	}
	projectorIn := ingress(projector)
	for what, in := range map[string]map[int32][]string{"API": apiIn, "projector": projectorIn} {
		if !slices.Equal(in[adminPort], []string{"monitoring"}) {
			t.Errorf("%s admin port %d: open to %v, want the namespace monitoring only", what, adminPort, in[adminPort])
		}
	}
	for port := range projectorIn {
		if port != adminPort {
			t.Errorf("projector: port %d open: it serves only its admin endpoints", port)
		}
	}
	egress := map[int32]bool{}
	for _, n := range b.netpols {
		sel, err := metav1.LabelSelectorAsSelector(&n.Spec.PodSelector)
		if err != nil {
			t.Fatalf("NetworkPolicy %s: %v", n.Name, err)
		}
		if !sel.Matches(labels.Set(projector)) || !slices.Contains(n.Spec.PolicyTypes, networkingv1.PolicyTypeEgress) {
			continue
		}
		for _, rule := range n.Spec.Egress {
			if len(rule.Ports) == 0 {
				t.Errorf("NetworkPolicy %s: egress to every port", n.Name)
			}
			for _, p := range rule.Ports {
				if p.Port == nil {
					t.Errorf("NetworkPolicy %s: egress to every port", n.Name)
					continue
				}
				egress[p.Port.IntVal] = true
			}
		}
	}
	for _, port := range []int32{4222, 5432, 53} {
		if !egress[port] {
			t.Errorf("Tether's pods may not reach port %d (NATS 4222, PostgreSQL 5432, DNS 53): %v", port, egress)
		}
	}
	if len(egress) != 3 {
		t.Errorf("Tether's pods may reach ports %v, want only NATS, PostgreSQL and DNS", egress)
	}
}

// TestPostgresCluster checks the CloudNativePG Cluster (not in the base):
// its name makes the app secret tether-pg-app the deployments read.
func TestPostgresCluster(t *testing.T) {
	data, err := os.ReadFile("postgres-cluster.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cluster struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name      string `json:"name"`
			Namespace string `json:"namespace"`
		} `json:"metadata"`
		Spec struct {
			Instances int `json:"instances"`
			Bootstrap struct {
				InitDB struct {
					Database string `json:"database"`
					Owner    string `json:"owner"`
				} `json:"initdb"`
			} `json:"bootstrap"`
			Storage struct {
				Size string `json:"size"`
			} `json:"storage"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal(data, &cluster); err != nil {
		t.Fatal(err)
	}
	if cluster.APIVersion != "postgresql.cnpg.io/v1" || cluster.Kind != "Cluster" {
		t.Errorf("%s %s, want postgresql.cnpg.io/v1 Cluster", cluster.APIVersion, cluster.Kind)
	}
	if cluster.Metadata.Name+"-app" != "tether-pg-app" || cluster.Metadata.Namespace != namespace {
		t.Errorf("cluster %s/%s: its app secret must be %s/tether-pg-app", cluster.Metadata.Namespace, cluster.Metadata.Name, namespace)
	}
	if cluster.Spec.Instances != 3 {
		t.Errorf("instances %d, want 3", cluster.Spec.Instances)
	}
	if db := cluster.Spec.Bootstrap.InitDB; db.Database != "tether" || db.Owner != "tether" {
		t.Errorf("initdb %+v, want database tether owned by tether", db)
	}
	if cluster.Spec.Storage.Size == "" {
		t.Error("no storage size")
	}
	// The Cluster is no part of the base: it needs the operator's CRDs.
	if err := new(base).add(data); err == nil {
		t.Error("the test's decoder accepted a Cluster: it should know only the base's kinds")
	}
}

// natsChartKeys are the keys of the NATS chart's values (nats-io/k8s,
// helm/charts/nats/values.yaml, the layout of chart 1.x, kept by 2.x) that
// nats-values.yaml may set; a key ending in "*" takes any keys under it.
var natsChartKeys = []string{
	"fullnameOverride", "nameOverride", "namespaceOverride", "global.labels.*",
	"config.cluster.enabled", "config.cluster.replicas", "config.cluster.port", "config.cluster.noAdvertise",
	"config.cluster.routeURLs.*", "config.cluster.tls.*", "config.cluster.merge.*",
	"config.jetstream.enabled", "config.jetstream.fileStore.enabled", "config.jetstream.fileStore.dir",
	"config.jetstream.fileStore.maxSize", "config.jetstream.fileStore.pvc.enabled", "config.jetstream.fileStore.pvc.size",
	"config.jetstream.fileStore.pvc.storageClassName", "config.jetstream.fileStore.pvc.name",
	"config.jetstream.memoryStore.enabled", "config.jetstream.memoryStore.maxSize", "config.jetstream.merge.*",
	"config.nats.port", "config.nats.tls.*", "config.monitor.enabled", "config.monitor.port", "config.merge.*",
	"container.image.*", "container.env.*", "container.resources.*", "container.merge.*",
	"podTemplate.topologySpreadConstraints.*", "podTemplate.merge.*", "statefulSet.merge.*",
	"service.enabled", "service.merge.*", "service.ports.*",
	"podDisruptionBudget.enabled", "promExporter.enabled", "promExporter.podMonitor.enabled",
	"natsBox.enabled", "reloader.enabled",
	// JSON patches (lists): add the server.conf mount and its volume.
	"container.patch", "podTemplate.patch",
	"natsBox.contexts.default.creds.secretName", "natsBox.contexts.default.creds.key",
}

// natsValues reads nats-values.yaml.
func natsValues(t *testing.T) map[string]any {
	t.Helper()
	data, err := os.ReadFile("nats-values.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var values map[string]any
	if err := yaml.Unmarshal(data, &values); err != nil {
		t.Fatal(err)
	}
	return values
}

func TestNATSValues(t *testing.T) {
	values := natsValues(t)
	for _, path := range leafPaths("", values) {
		if !slices.ContainsFunc(natsChartKeys, func(k string) bool {
			prefix, wild := strings.CutSuffix(k, "*")
			return path == k || wild && strings.HasPrefix(path, prefix)
		}) {
			t.Errorf("nats-values.yaml sets %s, which is not a key of the NATS chart's values layout", path)
		}
	}
	for path, want := range map[string]any{
		"config.cluster.enabled":                 true,
		"config.cluster.replicas":                float64(3),
		"config.jetstream.enabled":               true,
		"config.jetstream.fileStore.enabled":     true,
		"config.jetstream.fileStore.pvc.enabled": true,
		"fullnameOverride":                       "nats",
	} {
		if got, err := lookup(values, path); err != nil || got != want {
			t.Errorf("nats-values.yaml %s = %v (%v), want %v", path, got, err, want)
		}
	}
	// The route settings are the ones the cluster test runs with.
	conf, err := os.ReadFile("../nats/tether-cluster.conf")
	if err != nil {
		t.Fatal(err)
	}
	settings := regexp.MustCompile(`(?m)^\s*(\w+):\s*"?([^"\s]+)"?\s*$`).FindAllStringSubmatch(string(conf), -1)
	if len(settings) == 0 {
		t.Fatal("no settings found in tether-cluster.conf")
	}
	for _, kv := range settings {
		got, err := lookup(values, "config.cluster.merge."+kv[1])
		if err != nil || fmt.Sprint(got) != kv[2] {
			t.Errorf("nats-values.yaml config.cluster.merge.%s = %v (%v), want %s as in deploy/nats/tether-cluster.conf", kv[1], got, err, kv[2])
		}
	}
}

// leafPaths lists the dotted paths of v's leaves (an empty map is a leaf).
func leafPaths(prefix string, v any) []string {
	m, ok := v.(map[string]any)
	if !ok || len(m) == 0 {
		return []string{prefix}
	}
	var out []string
	for k, child := range m {
		p := k
		if prefix != "" {
			p = prefix + "." + k
		}
		out = append(out, leafPaths(p, child)...)
	}
	slices.Sort(out)
	return out
}

func lookup(v any, path string) (any, error) {
	for part := range strings.SplitSeq(path, ".") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, errors.New("not a map above " + part)
		}
		if v, ok = m[part]; !ok {
			return nil, errors.New("no key " + part)
		}
	}
	return v, nil
}

// The NATS credentials: `tether nats-auth init` (services/nats/natsauth)
// writes them, the user stores them in these Secrets and this ConfigMap
// (README.md, "NATS credentials"), and the pods mount them.
const (
	// natsCredsSecretPrefix + principal holds key principal+".creds".
	natsCredsSecretPrefix = "tether-nats-creds-"
	// natsSignersConfigMap holds key natsauth.SignersFile.
	natsSignersConfigMap = "tether-nats-signers"
	// natsServerAuthSecret holds key natsauth.ServerConf, for NATS.
	natsServerAuthSecret = "tether-nats-server-auth"
	// natsChartConfigDir is where the chart mounts nats.conf: its $include
	// paths are relative to it, as nats-server resolves includes.
	natsChartConfigDir = "/etc/nats-config"
)

// natsPrincipals is the NATS user each tether subcommand must connect as:
// services/cmd/tether refuses another principal's credentials.
var natsPrincipals = map[string]string{
	"apiserver":  natsauth.APIServer,
	"controller": natsauth.Controller,
	"projector":  natsauth.Projector,
	"migrate":    natsauth.Admin,
}

// natsReadsEvents are the subcommands that read events, and so verify
// their writers with --nats-signers; migrate reads none.
var natsReadsEvents = map[string]bool{"apiserver": true, "controller": true, "projector": true}

// mountedFile is what a path in a container is: a key of a Secret or a
// ConfigMap mounted as a volume.
type mountedFile struct {
	kind, name, key string // "Secret" or "ConfigMap", its name, the key
	mode            *int32 // the file's mode: the item's, else the volume's default
	readOnly        bool
}

// fileAt resolves path through c's volume mounts (the deepest that holds
// it) to the Secret or ConfigMap key it is. A subPath mount is refused: it
// never sees the Secret's updates, so a rotation would not reach the pod.
func fileAt(spec corev1.PodSpec, c corev1.Container, path string) (mountedFile, error) {
	var mount *corev1.VolumeMount
	for i, m := range c.VolumeMounts {
		if m.MountPath == path {
			return mountedFile{}, fmt.Errorf("%s is volume %s mounted as a single file (subPath), which never sees the Secret's or ConfigMap's updates: mount the volume's directory", path, m.Name)
		}
		if strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") && (mount == nil || len(m.MountPath) > len(mount.MountPath)) {
			mount = &c.VolumeMounts[i]
		}
	}
	if mount == nil {
		return mountedFile{}, fmt.Errorf("%s is in no volume mounted in container %s (the root filesystem has no such file)", path, c.Name)
	}
	if mount.SubPath != "" || mount.SubPathExpr != "" {
		return mountedFile{}, fmt.Errorf("%s: volume %s is mounted with a subPath, which never sees the Secret's or ConfigMap's updates", path, mount.Name)
	}
	rel := strings.TrimPrefix(path, strings.TrimSuffix(mount.MountPath, "/")+"/")
	i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == mount.Name })
	if i < 0 {
		return mountedFile{}, fmt.Errorf("%s: the pod has no volume %q", path, mount.Name)
	}
	v := spec.Volumes[i]
	f := mountedFile{readOnly: mount.ReadOnly}
	var items []corev1.KeyToPath
	switch {
	case v.Secret != nil:
		f.kind, f.name, f.mode, items = "Secret", v.Secret.SecretName, v.Secret.DefaultMode, v.Secret.Items
	case v.ConfigMap != nil:
		f.kind, f.name, f.mode, items = "ConfigMap", v.ConfigMap.Name, v.ConfigMap.DefaultMode, v.ConfigMap.Items
	default:
		return mountedFile{}, fmt.Errorf("%s: volume %s is neither a Secret nor a ConfigMap", path, v.Name)
	}
	if len(items) == 0 {
		f.key = rel
		return f, nil
	}
	j := slices.IndexFunc(items, func(it corev1.KeyToPath) bool { return it.Path == rel })
	if j < 0 {
		return mountedFile{}, fmt.Errorf("%s: %s %s's items project no file %q", path, f.kind, f.name, rel)
	}
	f.key = items[j].Key
	if items[j].Mode != nil {
		f.mode = items[j].Mode
	}
	return f, nil
}

// envValue is the literal value of c's variable name.
func envValue(c corev1.Container, name string) (string, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value, e.ValueFrom == nil && e.Value != ""
		}
	}
	return "", false
}

// volumeSecrets are the Secrets a volume mounts.
func volumeSecrets(v corev1.Volume) []string {
	var names []string
	if v.Secret != nil {
		names = append(names, v.Secret.SecretName)
	}
	if v.Projected != nil {
		for _, src := range v.Projected.Sources {
			if src.Secret != nil {
				names = append(names, src.Secret.Name)
			}
		}
	}
	return names
}

// TestNATSCredentials checks that every Tether pod connects to NATS as its
// own principal, and holds no other's credentials: TETHER_NATS_CREDS names
// the file <principal>.creds of the Secret tether-nats-creds-<principal>,
// mounted read-only as a whole volume (so a rotated Secret reaches it),
// readable by the pod's group only; no volume of the pod mounts another
// principal's Secret; the services verify event writers with the signers
// ConfigMap (TETHER_NATS_SIGNERS). Every control-plane principal of
// natsauth runs somewhere.
func TestNATSCredentials(t *testing.T) {
	b := renderBase(t)
	runs := map[string][]string{} // principal → workloads
	for _, w := range b.workloads() {
		own := map[string]bool{}
		for _, c := range w.spec.Containers {
			where := w.name + " container " + c.Name
			if len(c.Args) == 0 {
				continue
			}
			principal, ok := natsPrincipals[c.Args[0]]
			if !ok {
				t.Errorf("%s: tether %s: which NATS principal does it run as? (natsPrincipals)", where, c.Args[0])
				continue
			}
			own[natsCredsSecretPrefix+principal] = true
			runs[principal] = append(runs[principal], w.name)

			creds, ok := envValue(c, "TETHER_NATS_CREDS")
			if !ok {
				t.Errorf("%s: no TETHER_NATS_CREDS (a path): tether %s would connect to NATS as nobody, which NATS refuses", where, c.Args[0])
			} else if f, err := fileAt(w.spec, c, creds); err != nil {
				t.Errorf("%s: TETHER_NATS_CREDS: %v", where, err)
			} else {
				want := mountedFile{kind: "Secret", name: natsCredsSecretPrefix + principal, key: principal + ".creds"}
				if f.kind != want.kind || f.name != want.name || f.key != want.key {
					t.Errorf("%s: TETHER_NATS_CREDS=%s is key %q of %s %s, want key %q of Secret %s (principal %s)",
						where, creds, f.key, f.kind, f.name, want.key, want.name, principal)
				}
				if !f.readOnly {
					t.Errorf("%s: the NATS credentials are mounted writable", where)
				}
				switch {
				case f.mode == nil:
					t.Errorf("%s: the NATS credentials file has the default mode 0644, readable by any user: set defaultMode 0440", where)
				case *f.mode&0o007 != 0 || *f.mode&0o222 != 0:
					t.Errorf("%s: the NATS credentials file has mode %#o, want no write and nothing for others (0440 or 0400)", where, *f.mode)
				}
				// The file is root's: uid 65532 reads it as a member of the
				// pod's fsGroup, which the kubelet gives the file.
				if sc := w.spec.SecurityContext; sc == nil || sc.FSGroup == nil {
					t.Errorf("%s: no fsGroup: the process (uid %d) cannot read the root-owned credentials file", where, runAsUser)
				}
			}

			signers, ok := envValue(c, "TETHER_NATS_SIGNERS")
			if !ok {
				if natsReadsEvents[c.Args[0]] {
					t.Errorf("%s: no TETHER_NATS_SIGNERS (a path): tether %s would not verify who wrote the events it reads", where, c.Args[0])
				}
				continue
			}
			f, err := fileAt(w.spec, c, signers)
			if err != nil {
				t.Errorf("%s: TETHER_NATS_SIGNERS: %v", where, err)
				continue
			}
			if f.kind != "ConfigMap" || f.name != natsSignersConfigMap || f.key != natsauth.SignersFile || !f.readOnly {
				t.Errorf("%s: TETHER_NATS_SIGNERS=%s is key %q of %s %s (read-only %v), want key %q of ConfigMap %s, read-only",
					where, signers, f.key, f.kind, f.name, f.readOnly, natsauth.SignersFile, natsSignersConfigMap)
			}
		}
		for _, v := range w.spec.Volumes {
			for _, name := range volumeSecrets(v) {
				if strings.HasPrefix(name, natsCredsSecretPrefix) && !own[name] {
					t.Errorf("%s: volume %s mounts %s, another principal's NATS credentials", w.name, v.Name, name)
				}
			}
		}
	}
	for _, p := range natsauth.Components() {
		if len(runs[p]) == 0 {
			t.Errorf("no workload connects as NATS principal %s", p)
		}
	}
}

// TestNATSValuesAuthenticate checks that the NATS chart's values make
// nats-server authenticate with the operator of `tether nats-auth init`:
// the config includes server.conf, which is the key server.conf of the
// Secret tether-nats-server-auth mounted in the nats container (under
// /etc/, which the chart also mounts into its config reloader, so that a
// revocation reloads nats-server); and the nats-box connects as admin.
func TestNATSValuesAuthenticate(t *testing.T) {
	values := natsValues(t)
	merge, _ := lookup(values, "config.merge")
	var includes []string
	if m, ok := merge.(map[string]any); ok {
		for k, v := range m {
			if strings.HasSuffix(k, "$include") {
				includes = append(includes, fmt.Sprint(v))
			}
		}
	}
	if len(includes) != 1 {
		t.Fatalf("nats-values.yaml config.merge includes %q, want server.conf alone", includes)
	}
	// nats-server resolves an include against its config file's directory.
	conf := filepath.Join(natsChartConfigDir, includes[0])

	var pod corev1.PodSpec
	var nats corev1.Container
	nats.Name = "nats"
	nats.VolumeMounts = patchAdds[corev1.VolumeMount](t, values, "container.patch", "/volumeMounts/-")
	pod.Volumes = patchAdds[corev1.Volume](t, values, "podTemplate.patch", "/spec/volumes/-")
	f, err := fileAt(pod, nats, conf)
	if err != nil {
		t.Fatalf("nats-values.yaml includes %s (%s): %v", includes[0], conf, err)
	}
	if f.kind != "Secret" || f.name != natsServerAuthSecret || f.key != natsauth.ServerConf || !f.readOnly {
		t.Errorf("nats-values.yaml includes %s: key %q of %s %s (read-only %v), want key %q of Secret %s, read-only",
			conf, f.key, f.kind, f.name, f.readOnly, natsauth.ServerConf, natsServerAuthSecret)
	}
	if !strings.HasPrefix(conf, "/etc/") {
		t.Errorf("%s is not under /etc/: the chart's config reloader would not see it (reloader.natsVolumeMountPrefixes)", conf)
	}
	for path, want := range map[string]string{
		"natsBox.contexts.default.creds.secretName": natsCredsSecretPrefix + natsauth.Admin,
		"natsBox.contexts.default.creds.key":        natsauth.Admin + ".creds",
	} {
		if got, err := lookup(values, path); err != nil || got != want {
			t.Errorf("nats-values.yaml %s = %v (%v), want %s: NATS refuses the nats-box without credentials", path, got, err, want)
		}
	}
}

// patchAdds decodes strictly the values a JSON patch list of the chart's
// values adds at path (op add); any other op fails, as this test does not
// apply it.
func patchAdds[T any](t *testing.T, values map[string]any, key, path string) []T {
	t.Helper()
	raw, err := lookup(values, key)
	if err != nil {
		t.Fatalf("nats-values.yaml %s: %v", key, err)
	}
	ops, ok := raw.([]any)
	if !ok {
		t.Fatalf("nats-values.yaml %s is %T, want a JSON patch (a list)", key, raw)
	}
	var out []T
	for i, op := range ops {
		m, _ := op.(map[string]any)
		if m["op"] != "add" {
			t.Errorf("nats-values.yaml %s[%d]: op %v: only adds are checked here", key, i, m["op"])
			continue
		}
		if m["path"] != path {
			continue
		}
		doc, err := yaml.Marshal(m["value"])
		if err != nil {
			t.Fatal(err)
		}
		var v T
		if err := yaml.UnmarshalStrict(doc, &v); err != nil {
			t.Errorf("nats-values.yaml %s[%d]: %v", key, i, err)
			continue
		}
		out = append(out, v)
	}
	return out
}

// TestREADMECreatesTheNATSSecrets checks that README.md's commands create
// each Secret and ConfigMap of the NATS wiring, with the key the pods
// mount, from the file of the directory `tether nats-auth init` made.
func TestREADMECreatesTheNATSSecrets(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	initCmd := regexp.MustCompile(`tether nats-auth init --auth-dir (\S+)`).FindSubmatch(readme)
	if initCmd == nil {
		t.Fatal("README.md has no `tether nats-auth init --auth-dir DIR`")
	}
	dir := string(initCmd[1])
	type source struct{ key, file string }
	want := map[string]source{
		"Secret " + natsServerAuthSecret:    {natsauth.ServerConf, filepath.Join(dir, natsauth.ServerConf)},
		"ConfigMap " + natsSignersConfigMap: {natsauth.SignersFile, filepath.Join(dir, natsauth.SignersFile)},
	}
	for _, p := range natsauth.Components() {
		want["Secret "+natsCredsSecretPrefix+p] = source{p + ".creds", natsauth.CredsPath(dir, p)}
	}
	seen := map[string]bool{}
	create := regexp.MustCompile(`kubectl -n ` + namespace + ` create (secret generic|configmap) (\S+) --from-file=([^=\s]+)=(\S+)`)
	for _, m := range create.FindAllStringSubmatch(string(readme), -1) {
		what := "Secret " + m[2]
		if m[1] == "configmap" {
			what = "ConfigMap " + m[2]
		}
		w, ok := want[what]
		if !ok {
			continue
		}
		seen[what] = true
		if got := (source{m[3], m[4]}); got != w {
			t.Errorf("README.md: %s from --from-file=%s=%s, want --from-file=%s=%s", what, got.key, got.file, w.key, w.file)
		}
	}
	for what := range want {
		if !seen[what] {
			t.Errorf("README.md does not say how to create %s (kubectl -n %s create … --from-file=KEY=FILE)", what, namespace)
		}
	}
}
