package charttest

import (
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"

	"github.com/gpuplane/gpuplane/internal/app"
)

const serviceMonitorAPI = "monitoring.coreos.com/v1/ServiceMonitor"

func fullValues(t *testing.T) map[string]any {
	t.Helper()
	v, err := ReadValuesFile(filepath.Join("testdata", "full-values.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func render(t *testing.T, opts Options) *Rendered {
	t.Helper()
	r, err := Render(opts)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// renders are the two configurations every structural test checks.
func renders(t *testing.T) map[string]*Rendered {
	return map[string]*Rendered{
		"defaults": render(t, Options{}),
		"full":     render(t, Options{Values: fullValues(t), APIVersions: []string{serviceMonitorAPI}}),
	}
}

func TestLint(t *testing.T) {
	kv, err := common.ParseKubeVersion("v1.37.2")
	if err != nil {
		t.Fatal(err)
	}
	for name, vals := range map[string]map[string]any{"defaults": withDatabaseSecret(nil), "full": fullValues(t)} {
		t.Run(name, func(t *testing.T) {
			lint := action.NewLint()
			lint.Strict = true // warnings fail too
			lint.Namespace = "gpuplane-system"
			lint.KubeVersion = kv
			res := lint.Run([]string{Dir()}, vals)
			for _, m := range res.Messages {
				t.Logf("lint: %s", m)
			}
			if res.TotalChartsLinted != 1 {
				t.Errorf("linted %d charts, want 1", res.TotalChartsLinted)
			}
			for _, err := range res.Errors {
				t.Errorf("lint: %v", err)
			}
		})
	}
}

func TestRenderDefaults(t *testing.T) {
	r := render(t, Options{})
	want := []string{
		"ConfigMap/gpuplane-system/gpuplane",
		"ServiceAccount/gpuplane-system/gpuplane-server",
		"ServiceAccount/gpuplane-system/gpuplane-worker",
		"ServiceAccount/gpuplane-system/gpuplane-migrate",
		"ClusterRole/gpuplane-worker",
		"ClusterRoleBinding/gpuplane-worker",
		"ClusterRole/gpuplane-server",
		"ClusterRoleBinding/gpuplane-server",
		"Deployment/gpuplane-system/gpuplane-server",
		"Deployment/gpuplane-system/gpuplane-worker",
		"PodDisruptionBudget/gpuplane-system/gpuplane-server",
		"Service/gpuplane-system/gpuplane-grpc",
		"Service/gpuplane-system/gpuplane-http",
		"Service/gpuplane-system/gpuplane-worker-metrics",
		"Service/gpuplane-system/gpuplane-server-metrics",
		"Job/gpuplane-system/gpuplane-migrate",
	}
	var got []string
	for _, o := range r.Objects {
		got = append(got, Key(o))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("objects:\n got %v\nwant %v", got, want)
	}

	server := deployment(t, r, "gpuplane-server")
	if *server.Spec.Replicas != 2 {
		t.Errorf("server replicas %d, want 2", *server.Spec.Replicas)
	}
	c := server.Spec.Template.Spec.Containers[0]
	if !slices.Equal(c.Args, []string{"serve"}) {
		t.Errorf("server args %v", c.Args)
	}
	if p := c.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.String() != "http" {
		t.Errorf("readiness probe %+v, want GET /readyz on http", p)
	}
	if p := c.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "http" {
		t.Errorf("liveness probe %+v, want GET /healthz on http", p)
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if !reflect.DeepEqual(ports, map[string]int32{"grpc": 9090, "http": 8080, "metrics": 8081}) {
		t.Errorf("server ports %v", ports)
	}
	if !*server.Spec.Template.Spec.AutomountServiceAccountToken {
		t.Error("server needs its token for the in-cluster host config (node capacity)")
	}

	worker := deployment(t, r, "gpuplane-worker")
	wc := worker.Spec.Template.Spec.Containers[0]
	if *worker.Spec.Replicas != 2 || !slices.Equal(wc.Args, []string{"worker"}) {
		t.Errorf("worker replicas %d args %v", *worker.Spec.Replicas, wc.Args)
	}
	if p := wc.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" || p.HTTPGet.Port.String() != "metrics" {
		t.Errorf("worker liveness probe %+v, want GET /healthz on metrics", p)
	}
	if len(wc.Ports) != 1 || wc.Ports[0].Name != "metrics" || wc.Ports[0].ContainerPort != 8081 {
		t.Errorf("worker ports %+v, want metrics 8081", wc.Ports)
	}
	for _, c := range []corev1.Container{c, wc} {
		if got := envOf(c)["GPUPLANE_METRICS_ADDR"].Value; got != ":8081" {
			t.Errorf("%s: GPUPLANE_METRICS_ADDR %q, want :8081", c.Name, got)
		}
	}
	// Metrics name every team: the public HTTP Service does not carry them.
	if l := r.Find("Service", "gpuplane-http").GetLabels(); l["gpuplane.io/metrics"] != "" {
		t.Errorf("the public HTTP Service is labelled for scraping: %v", l)
	}
	// The worker configures virtual API servers with the same OIDC issuer.
	if e := envOf(wc)["GPUPLANE_OIDC_ISSUER_URL"]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Errorf("worker OIDC issuer %+v, want it from the Secret", e)
	}

	job := r.Find("Job", "gpuplane-migrate")
	if hook := job.GetAnnotations()["helm.sh/hook"]; hook != "pre-install,pre-upgrade" {
		t.Errorf("migration hook %q", hook)
	}
	var j batchv1.Job
	convert(t, job, &j)
	if args := j.Spec.Template.Spec.Containers[0].Args; !slices.Equal(args, []string{"migrate", "up"}) {
		t.Errorf("migration args %v", args)
	}
	// The Job runs before the release's other objects exist: its
	// ServiceAccount must be a hook too, created first.
	sa := r.Find("ServiceAccount", j.Spec.Template.Spec.ServiceAccountName)
	weight := func(o *unstructured.Unstructured) int {
		w, err := strconv.Atoi(o.GetAnnotations()["helm.sh/hook-weight"])
		if err != nil {
			t.Fatalf("%s: hook weight: %v", Key(o), err)
		}
		return w
	}
	if sa == nil || sa.GetAnnotations()["helm.sh/hook"] != "pre-install,pre-upgrade" || weight(sa) >= weight(job) {
		t.Errorf("migration ServiceAccount must be an earlier pre-install hook: %v", sa)
	}
	for _, c := range j.Spec.Template.Spec.Containers {
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				t.Errorf("migration reads ConfigMap %s, which does not exist yet at pre-install", e.ConfigMapRef.Name)
			}
		}
	}

	// Secrets only by reference.
	env := envOf(server.Spec.Template.Spec.Containers[0])
	if e := env["DATABASE_URL"]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "gpuplane-database" || e.ValueFrom.SecretKeyRef.Key != "url" {
		t.Errorf("DATABASE_URL %+v, want secretKeyRef gpuplane-database/url", e)
	}
	if e := env["GPUPLANE_OIDC_ISSUER_URL"]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "gpuplane-oidc" || e.ValueFrom.SecretKeyRef.Key != "issuer-url" {
		t.Errorf("GPUPLANE_OIDC_ISSUER_URL %+v, want secretKeyRef gpuplane-oidc/issuer-url", e)
	}
	if _, set := env["GPUPLANE_OIDC_CLIENT_ID"]; set {
		t.Error("client id set although neither a value nor a Secret key is given (gpuplane's default applies)")
	}
	if _, set := env["KUBECONFIG"]; set {
		t.Error("KUBECONFIG set by default; the in-cluster config is the default")
	}

	for _, kind := range []string{"Ingress", "ServiceMonitor"} {
		if objs := r.OfKind(kind); len(objs) > 0 {
			t.Errorf("%s rendered by default", kind)
		}
	}
}

func TestRenderFull(t *testing.T) {
	r := render(t, Options{Values: fullValues(t), APIVersions: []string{serviceMonitorAPI}})
	for _, key := range []string{
		"Ingress/gpuplane-system/gp-http", "Ingress/gpuplane-system/gp-grpc",
		"ServiceMonitor/monitoring/gp", "PodDisruptionBudget/gpuplane-system/gp-server",
	} {
		if _, ok := r.Source[key]; !ok {
			t.Errorf("%s not rendered", key)
		}
	}
	server := deployment(t, r, "gp-server")
	c := server.Spec.Template.Spec.Containers[0]
	if c.Image != "registry.example.com/platform/gpuplane@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef" {
		t.Errorf("image %s: the digest must win over the tag", c.Image)
	}
	env := envOf(c)
	if e := env["GPUPLANE_OIDC_ISSUER_URL"]; e.Value != "https://login.example.com/realms/main" {
		t.Errorf("issuer %+v, want the plain value", e)
	}
	if e := env["GPUPLANE_OIDC_CLIENT_ID"]; e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "oidc-settings" || e.ValueFrom.SecretKeyRef.Key != "client-id" {
		t.Errorf("client id %+v, want secretKeyRef oidc-settings/client-id", e)
	}
	for _, d := range []*appsv1.Deployment{server, deployment(t, r, "gp-worker")} {
		c := d.Spec.Template.Spec.Containers[0]
		if e := envOf(c)["GPUPLANE_OIDC_CA_FILE"]; e.Value != "/etc/gpuplane/oidc-ca/bundle.pem" || !mounted(d.Spec.Template.Spec, c, e.Value) {
			t.Errorf("%s: OIDC CA file %q is not on a mounted volume", d.Name, e.Value)
		}
		e := envOf(c)["KUBECONFIG"]
		if e.Value != "/etc/gpuplane/host-cluster/config" || !mounted(d.Spec.Template.Spec, c, e.Value) {
			t.Errorf("%s: KUBECONFIG %q is not on a mounted volume", d.Name, e.Value)
		}
		if *d.Spec.Template.Spec.AutomountServiceAccountToken {
			t.Errorf("%s mounts a token it does not need with a host kubeconfig", d.Name)
		}
	}
	cm := r.Find("ConfigMap", "gp")
	for k, want := range map[string]string{
		"GPUPLANE_PLATFORM_ADMIN_GROUPS": "platform-admins,sre", "GPUPLANE_OVERCOMMIT": "1.5",
		"GPUPLANE_VCLUSTER_KUBECONFIG_SERVER": "https://{name}.{namespace}.gpu.example.com",
		"GPUPLANE_WORKER_CONCURRENCY":         "8", "GPUPLANE_RESYNC_INTERVAL": "10m",
		"GPUPLANE_PROVISIONING_DEADLINE":   "20m",
		"GPUPLANE_VCLUSTER_CHART_VERSIONS": "0.36.1,0.20.0", "GPUPLANE_DEFAULT_CHART_VERSION": "0.36.1",
		"GPUPLANE_TENANT_INGRESS_NAMESPACES": "ingress-nginx,monitoring,gpuplane-system",
		"GPUPLANE_VCLUSTER_EXPOSURE":         "Ingress", "GPUPLANE_VCLUSTER_EXPOSURE_HOST": "{name}.vc.example.com",
		"GPUPLANE_VCLUSTER_INGRESS_CLASS": "nginx",
		"GPUPLANE_VCLUSTER_EXPOSURE_ANNOTATIONS": "nginx.ingress.kubernetes.io/backend-protocol=HTTPS," +
			"nginx.ingress.kubernetes.io/ssl-passthrough=true",
		"GPUPLANE_SHARED_POD_SECURITY": "restricted", "GPUPLANE_SHARED_PRIORITY_CLASSES": "train",
		"GPUPLANE_SHARED_PREEMPTIBILITY": "preemptible", "GPUPLANE_DEDICATED_POD_SECURITY": "baseline",
		"GPUPLANE_DEDICATED_PRIORITY_CLASSES": "train,inference", "GPUPLANE_DEDICATED_PREEMPTIBILITY": "preemptible,non-preemptible",
		"GPUPLANE_KAI_NODE_POOL_LABEL": "kai.scheduler/node-pool",
	} {
		if got, _, _ := unstructured.NestedString(cm.Object, "data", k); got != want {
			t.Errorf("config %s = %q, want %q", k, got, want)
		}
	}
}

// TestWorkerMayManageIngressesOnlyWhenExposedByThem: the worker's
// ClusterRole holds Ingress permissions only with exposure mode Ingress
// (internal/rbacproof proves every other permission needed).
func TestWorkerMayManageIngressesOnlyWhenExposedByThem(t *testing.T) {
	grantsIngress := func(r *Rendered) bool {
		var cr rbacv1.ClusterRole
		convert(t, r.Find("ClusterRole", "gp-worker"), &cr)
		return slices.ContainsFunc(cr.Rules, func(rule rbacv1.PolicyRule) bool { return slices.Contains(rule.Resources, "ingresses") })
	}
	if grantsIngress(render(t, Options{Values: map[string]any{"fullnameOverride": "gp"}})) {
		t.Error("default (ClusterIP) exposure: the worker may manage Ingresses")
	}
	if !grantsIngress(render(t, Options{Values: fullValues(t)})) {
		t.Error("exposure Ingress: the worker cannot create the control planes' Ingresses")
	}
}

func TestServiceMonitorOnlyWithItsAPI(t *testing.T) {
	r := render(t, Options{Values: map[string]any{"serviceMonitor": map[string]any{"enabled": true}}})
	if len(r.OfKind("ServiceMonitor")) != 0 {
		t.Error("ServiceMonitor rendered for a cluster that does not serve monitoring.coreos.com/v1")
	}
	if !strings.Contains(r.Notes, "WARNING: serviceMonitor.enabled") {
		t.Errorf("NOTES do not warn:\n%s", r.Notes)
	}
	r = render(t, Options{Values: map[string]any{"serviceMonitor": map[string]any{"enabled": true}}, APIVersions: []string{serviceMonitorAPI}})
	if len(r.OfKind("ServiceMonitor")) != 1 {
		t.Error("no ServiceMonitor although enabled and served")
	}
}

func TestSchema(t *testing.T) {
	if err := ValidateValues(nil); err != nil {
		t.Errorf("defaults: %v", err)
	}
	if err := ValidateValues(fullValues(t)); err != nil {
		t.Errorf("full values: %v", err)
	}
	// Each must be refused, and the error must name the offending path.
	bad := []struct {
		name   string
		values string
		path   string
	}{
		{"unknown top-level key", `servr: {replicas: 2}`, "servr"},
		{"unknown nested key", `server: {replica: 2}`, "replica"},
		{"replicas not a number", `server: {replicas: two}`, "/server/replicas"},
		{"zero API server replicas", `server: {replicas: 0}`, "/server/replicas"},
		{"negative worker replicas", `worker: {replicas: -1}`, "/worker/replicas"},
		{"bad pull policy", `image: {pullPolicy: Sometimes}`, "/image/pullPolicy"},
		{"bad digest", `image: {digest: "latest"}`, "/image/digest"},
		{"bad database Secret name", `database: {existingSecret: "Pg_App"}`, "/database/existingSecret"},
		{"grpcIngress with the old single host", `grpcIngress: {host: grpc.example.com}`, "host"},
		{"grpcIngress host missing", `grpcIngress: {hosts: [{paths: [{path: /}]}]}`, "/grpcIngress/hosts/0"},
		{"autoscaling to zero", `server: {autoscaling: {minReplicas: 0}}`, "/server/autoscaling/minReplicas"},
		{"top-level serviceAccount (now per component)", `serviceAccount: {create: true}`, "serviceAccount"},
		{"service account name", `worker: {serviceAccount: {name: "Worker SA"}}`, "/worker/serviceAccount/name"},
		{"networkPolicy typo", `networkPolicy: {enable: true}`, "enable"},
		{"serviceMonitor namespace", `serviceMonitor: {namespace: "Monitoring"}`, "/serviceMonitor/namespace"},
		{"database URL as a plain value", `database: {url: "postgres://u:p@db/x"}`, "url"},
		{"no OIDC issuer at all", `oidc: {issuerURL: "", existingSecret: ""}`, "/oidc"},
		{"issuer not a URL", `oidc: {issuerURL: "login.example.com"}`, "/oidc/issuerURL"},
		{"client id key without a Secret", `oidc: {issuerURL: "https://x", existingSecret: "", clientIDKey: id}`, "/oidc"},
		{"two CA bundle sources", `oidc: {caBundle: {configMap: a, secret: b}}`, "/oidc/caBundle"},
		{"admin group with a comma", `oidc: {platformAdminGroups: ["a,b"]}`, "/oidc/platformAdminGroups/0"},
		{"bad log level", `config: {logLevel: verbose}`, "/config/logLevel"},
		{"bad duration", `worker: {resyncInterval: "5 minutes"}`, "/worker/resyncInterval"},
		{"bad deadline", `worker: {provisioningDeadline: "soon"}`, "/worker/provisioningDeadline"},
		{"overcommit zero", `config: {overcommit: 0}`, "/config/overcommit"},
		{"chart repo not a URL", `config: {vcluster: {chartRepo: charts.loft.sh}}`, "/config/vcluster/chartRepo"},
		{"bad service type", `server: {service: {type: Internal}}`, "/server/service/type"},
		{"port out of range", `server: {service: {grpcPort: 70000}}`, "/server/service/grpcPort"},
		{"ingress host missing", `ingress: {hosts: [{paths: [{path: /}]}]}`, "/ingress/hosts/0"},
		{"bad path type", `ingress: {hosts: [{host: a, paths: [{path: /, pathType: Regex}]}]}`, "pathType"},
		{"concurrency zero", `worker: {concurrency: 0}`, "/worker/concurrency"},
		{"serviceMonitor typo", `serviceMonitor: {enable: true}`, "enable"},
		{"privileged tier", `config: {tiers: {shared: {podSecurity: privileged}}}`, "/config/tiers/shared/podSecurity"},
		{"system priority class for tenants", `config: {tiers: {dedicated: {priorityClasses: [inference, system-node-critical]}}}`,
			"/config/tiers/dedicated/priorityClasses/1"},
		{"made-up preemptibility", `config: {tiers: {shared: {preemptibility: [never]}}}`, "/config/tiers/shared/preemptibility/0"},
		{"unknown tier", `config: {tiers: {sandbox: {podSecurity: baseline}}}`, "sandbox"},
		{"bad KAI node-pool label", `config: {kaiNodePoolLabel: "kai scheduler"}`, "/config/kaiNodePoolLabel"},
		{"bad exposure mode", `config: {vcluster: {exposure: {mode: Route}}}`, "/config/vcluster/exposure/mode"},
		{"exposure host with a scheme", `config: {vcluster: {exposure: {host: "https://vc.example.com"}}}`, "/config/vcluster/exposure/host"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			var v map[string]any
			if err := yaml.Unmarshal([]byte(tc.values), &v); err != nil {
				t.Fatal(err)
			}
			err := ValidateValues(v)
			if err == nil {
				t.Fatalf("%s accepted", tc.values)
			}
			if !strings.Contains(err.Error(), tc.path) {
				t.Errorf("error does not name %s: %v", tc.path, err)
			}
			// helm install validates the same way before rendering.
			if _, err := Render(Options{Values: v}); err == nil {
				t.Error("Render accepted the values")
			}
		})
	}
}

// TestPodSecurity: every pod the chart renders meets the restricted Pod
// Security profile, container by container.
func TestPodSecurity(t *testing.T) {
	for name, r := range renders(t) {
		t.Run(name, func(t *testing.T) {
			pods := podSpecs(t, r)
			if len(pods) != 3 {
				t.Errorf("%d pod templates, want 3 (server, worker, migration)", len(pods))
			}
			for owner, spec := range pods {
				checkRestricted(t, owner, spec)
			}
		})
	}
}

func checkRestricted(t *testing.T, owner string, spec corev1.PodSpec) {
	t.Helper()
	psc := spec.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("%s: pod runAsNonRoot not set", owner)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod seccompProfile not RuntimeDefault", owner)
	}
	if spec.HostNetwork || spec.HostPID || spec.HostIPC {
		t.Errorf("%s: host namespaces", owner)
	}
	for _, v := range spec.Volumes {
		if v.HostPath != nil {
			t.Errorf("%s: hostPath volume %s", owner, v.Name)
		}
	}
	all := append(slices.Clone(spec.InitContainers), spec.Containers...)
	if len(all) == 0 {
		t.Errorf("%s: no containers", owner)
	}
	for _, c := range all {
		who := owner + " container " + c.Name
		sc := c.SecurityContext
		if sc == nil {
			t.Errorf("%s: no securityContext", who)
			continue
		}
		if sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
			t.Errorf("%s: runAsNonRoot not true", who)
		}
		if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
			t.Errorf("%s: runs as uid 0", who)
		}
		if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
			t.Errorf("%s: readOnlyRootFilesystem not true", who)
		}
		if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
			t.Errorf("%s: allowPrivilegeEscalation not false", who)
		}
		if sc.Privileged != nil && *sc.Privileged {
			t.Errorf("%s: privileged", who)
		}
		if sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0 {
			t.Errorf("%s: capabilities %+v, want drop [ALL] and nothing added", who, sc.Capabilities)
		}
		if sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: seccompProfile not RuntimeDefault", who)
		}
		for _, p := range c.Ports {
			if p.HostPort != 0 {
				t.Errorf("%s: hostPort %d", who, p.HostPort)
			}
		}
		if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
			t.Errorf("%s: memory request and limit must be set", who)
		}
	}
}

// TestWiring: Services, PDB, ServiceMonitor and Ingresses point at things
// that exist, and every setting the chart passes is one gpuplane reads.
func TestWiring(t *testing.T) {
	known := configEnvNames()
	for name, r := range renders(t) {
		t.Run(name, func(t *testing.T) {
			pods := podSpecs(t, r)
			podLabels := map[string]labels.Set{}
			for _, d := range r.OfKind("Deployment") {
				var dep appsv1.Deployment
				convert(t, d, &dep)
				podLabels[dep.Name] = dep.Spec.Template.Labels
				sel := labels.SelectorFromSet(dep.Spec.Selector.MatchLabels)
				if !sel.Matches(labels.Set(dep.Spec.Template.Labels)) {
					t.Errorf("Deployment %s selector does not match its pods", dep.Name)
				}
			}
			matching := func(sel map[string]string) []string {
				var out []string
				for name, l := range podLabels {
					if labels.SelectorFromSet(sel).Matches(l) {
						out = append(out, name)
					}
				}
				return out
			}
			services := map[string]corev1.Service{}
			for _, o := range r.OfKind("Service") {
				var svc corev1.Service
				convert(t, o, &svc)
				services[svc.Name] = svc
				targets := matching(svc.Spec.Selector)
				wantSuffix := "-server"
				if strings.HasSuffix(svc.Name, "-worker-metrics") {
					wantSuffix = "-worker"
				}
				if len(targets) != 1 || !strings.HasSuffix(targets[0], wantSuffix) {
					t.Errorf("Service %s selects %v, want the *%s Deployment", svc.Name, targets, wantSuffix)
					continue
				}
				spec := pods["Deployment/"+targets[0]]
				for _, p := range svc.Spec.Ports {
					if !slices.ContainsFunc(spec.Containers[0].Ports, func(cp corev1.ContainerPort) bool { return cp.Name == p.TargetPort.String() }) {
						t.Errorf("Service %s port %s targets %s, which the pods do not have", svc.Name, p.Name, p.TargetPort.String())
					}
				}
			}
			for _, o := range r.OfKind("PodDisruptionBudget") {
				sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
				if got := matching(sel); len(got) != 1 || !strings.HasSuffix(got[0], "-server") {
					t.Errorf("PDB %s covers %v", o.GetName(), got)
				}
			}
			for _, o := range r.OfKind("ServiceMonitor") {
				// Each endpoint scrapes every selected Service with its port;
				// together they scrape the server's and the worker's metrics
				// Services, never the public HTTP one.
				sel, _, _ := unstructured.NestedStringMap(o.Object, "spec", "selector", "matchLabels")
				endpoints, _, _ := unstructured.NestedSlice(o.Object, "spec", "endpoints")
				var scraped []string
				for _, ep := range endpoints {
					port, _, _ := unstructured.NestedString(ep.(map[string]any), "port")
					var hit []string
					for name, svc := range services {
						if labels.SelectorFromSet(sel).Matches(labels.Set(svc.Labels)) &&
							slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == port }) {
							hit = append(hit, name)
						}
					}
					if len(hit) == 0 {
						t.Errorf("ServiceMonitor endpoint port %s matches no Service", port)
					}
					scraped = append(scraped, hit...)
				}
				slices.Sort(scraped)
				if want := []string{o.GetName() + "-server-metrics", o.GetName() + "-worker-metrics"}; !slices.Equal(scraped, want) {
					t.Errorf("ServiceMonitor scrapes %v, want %v", scraped, want)
				}
			}
			for _, o := range r.OfKind("Ingress") {
				rules, _, _ := unstructured.NestedSlice(o.Object, "spec", "rules")
				for _, rule := range rules {
					paths, _, _ := unstructured.NestedSlice(rule.(map[string]any), "http", "paths")
					for _, p := range paths {
						svcName, _, _ := unstructured.NestedString(p.(map[string]any), "backend", "service", "name")
						port, _, _ := unstructured.NestedString(p.(map[string]any), "backend", "service", "port", "name")
						svc, ok := services[svcName]
						if !ok || !slices.ContainsFunc(svc.Spec.Ports, func(sp corev1.ServicePort) bool { return sp.Name == port }) {
							t.Errorf("Ingress %s routes to %s port %s, which does not exist", o.GetName(), svcName, port)
						}
					}
				}
			}

			// Every GPUPLANE_* variable the chart sets is a gpuplane setting.
			for _, o := range r.OfKind("ConfigMap") {
				data, _, _ := unstructured.NestedStringMap(o.Object, "data")
				for k := range data {
					if !known[k] {
						t.Errorf("ConfigMap %s sets %s, which gpuplane does not read", o.GetName(), k)
					}
				}
			}
			for owner, spec := range pods {
				for _, c := range spec.Containers {
					for _, e := range c.Env {
						if strings.HasPrefix(e.Name, "GPUPLANE_") && !known[e.Name] {
							t.Errorf("%s sets %s, which gpuplane does not read", owner, e.Name)
						}
					}
					for _, e := range c.EnvFrom {
						if e.ConfigMapRef != nil && r.Find("ConfigMap", e.ConfigMapRef.Name) == nil {
							t.Errorf("%s reads ConfigMap %s, which the chart does not render", owner, e.ConfigMapRef.Name)
						}
					}
				}
			}
		})
	}
}

// The chart's defaults are gpuplane's: an install without values runs the
// tier profiles, exposure and versions the README documents (the
// ConfigMap passes them explicitly, so a drift would change behaviour).
func TestDefaultsMatchTheServer(t *testing.T) {
	cm := render(t, Options{}).Find("ConfigMap", "gpuplane")
	d := app.Defaults()
	for k, want := range map[string]string{
		"GPUPLANE_SHARED_POD_SECURITY": d.SharedPodSecurity, "GPUPLANE_SHARED_PRIORITY_CLASSES": d.SharedPriorityClasses,
		"GPUPLANE_SHARED_PREEMPTIBILITY": d.SharedPreemptibility, "GPUPLANE_DEDICATED_POD_SECURITY": d.DedicatedPodSecurity,
		"GPUPLANE_DEDICATED_PRIORITY_CLASSES": d.DedicatedPriorityClasses, "GPUPLANE_DEDICATED_PREEMPTIBILITY": d.DedicatedPreemptibility,
		"GPUPLANE_VCLUSTER_EXPOSURE": d.Exposure, "GPUPLANE_VCLUSTER_CHART_VERSIONS": d.VClusterChartVersions,
		"GPUPLANE_DEFAULT_CHART_VERSION": d.DefaultChartVersion, "GPUPLANE_TENANT_INGRESS_NAMESPACES": d.TenantIngressNS,
	} {
		if got, _, _ := unstructured.NestedString(cm.Object, "data", k); got != want {
			t.Errorf("chart default %s = %q, gpuplane's default %q", k, got, want)
		}
	}
	for _, k := range []string{"GPUPLANE_KAI_NODE_POOL_LABEL", "GPUPLANE_VCLUSTER_EXPOSURE_HOST", "GPUPLANE_VCLUSTER_INGRESS_CLASS"} {
		if v, found, _ := unstructured.NestedString(cm.Object, "data", k); found {
			t.Errorf("chart default sets %s=%q; gpuplane's default is unset", k, v)
		}
	}
}

// configEnvNames lists the environment variables gpuplane's Config reads.
func configEnvNames() map[string]bool {
	out := map[string]bool{}
	typ := reflect.TypeOf(app.Config{})
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		env := f.Tag.Get("env")
		if env == "" {
			env = "GPUPLANE_" + strings.ToUpper(strings.ReplaceAll(f.Tag.Get("flag"), "-", "_"))
		}
		out[env] = true
	}
	return out
}

func deployment(t *testing.T, r *Rendered, name string) *appsv1.Deployment {
	t.Helper()
	o := r.Find("Deployment", name)
	if o == nil {
		t.Fatalf("no Deployment %s", name)
	}
	var d appsv1.Deployment
	convert(t, o, &d)
	return &d
}

// podSpecs returns the pod template of every workload, by "Kind/name".
func podSpecs(t *testing.T, r *Rendered) map[string]corev1.PodSpec {
	t.Helper()
	out := map[string]corev1.PodSpec{}
	for _, o := range r.Objects {
		switch o.GetKind() {
		case "Deployment":
			var d appsv1.Deployment
			convert(t, o, &d)
			out["Deployment/"+d.Name] = d.Spec.Template.Spec
		case "Job":
			var j batchv1.Job
			convert(t, o, &j)
			out["Job/"+j.Name] = j.Spec.Template.Spec
		case "StatefulSet", "DaemonSet", "CronJob", "Pod", "ReplicaSet":
			t.Fatalf("%s: extend podSpecs to check this kind", Key(o))
		}
	}
	return out
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		out[e.Name] = e
	}
	return out
}

// mounted reports whether path lies inside one of c's volume mounts.
func mounted(spec corev1.PodSpec, c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") &&
			slices.ContainsFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
			return true
		}
	}
	return false
}

func convert(t *testing.T, o *unstructured.Unstructured, into any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, into, true); err != nil {
		t.Fatalf("%s: %v", Key(o), err)
	}
}
