package charttest

import (
	"maps"
	"slices"
	"strings"
	"testing"

	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func withDatabaseSecret(v map[string]any) map[string]any {
	out := maps.Clone(v)
	if out == nil {
		out = map[string]any{}
	}
	out["database"] = map[string]any{"existingSecret": "gpuplane-database"}
	return out
}

// database.existingSecret has no default: the install stops with a message
// that names the key and says what to create, instead of pods that crash
// on a missing Secret.
func TestDatabaseSecretRequired(t *testing.T) {
	_, err := Render(Options{Values: map[string]any{"database": map[string]any{"existingSecret": ""}}})
	if err == nil || !strings.Contains(err.Error(), "database.existingSecret is required") ||
		!strings.Contains(err.Error(), "kubectl create secret generic") {
		t.Errorf("render without a database Secret: %v", err)
	}
	if err := ValidateValues(nil); err != nil {
		t.Errorf("the defaults must pass the schema (the template explains the missing Secret): %v", err)
	}
	r := render(t, Options{})
	c := deployment(t, r, "gpuplane-server").Spec.Template.Spec.Containers[0]
	if ref := envOf(c)["DATABASE_URL"].ValueFrom.SecretKeyRef; ref.Name != "gpuplane-database" || ref.Key != "url" {
		t.Errorf("DATABASE_URL from %s/%s", ref.Name, ref.Key)
	}
}

// The full values switch on every convention: per-component
// ServiceAccounts, extra args/envFrom/volumes, security context and probe
// overrides, HPA, NetworkPolicy, ServiceMonitor namespace and relabelings,
// gRPC Ingress hosts.
func TestChartConventions(t *testing.T) {
	r := render(t, Options{Values: fullValues(t), APIVersions: []string{serviceMonitorAPI}})

	// Per-component ServiceAccounts with their own annotations.
	for name, role := range map[string]string{"gp-api": "gpuplane-server", "gp-worker": "gpuplane-worker", "gp-migrate": "gpuplane-migrate"} {
		sa := r.Find("ServiceAccount", name)
		if sa == nil {
			t.Errorf("ServiceAccount %s not rendered", name)
			continue
		}
		if got := sa.GetAnnotations()["iam.example.com/role"]; got != role {
			t.Errorf("%s role annotation %q, want %q", name, got, role)
		}
	}
	if got := r.Find("ServiceAccount", "gp-migrate").GetAnnotations()["helm.sh/hook"]; got != "pre-install,pre-upgrade" {
		t.Errorf("the migration ServiceAccount is no pre-install hook (%q)", got)
	}
	server, worker := deployment(t, r, "gp-server"), deployment(t, r, "gp-worker")
	if sa := server.Spec.Template.Spec.ServiceAccountName; sa != "gp-api" {
		t.Errorf("server runs as %s, want gp-api", sa)
	}
	var job batchv1.Job
	convert(t, r.Find("Job", "gp-migrate"), &job)

	// Extra args, envFrom, volumes and mounts, security contexts.
	if a := server.Spec.Template.Spec.Containers[0].Args; !slices.Equal(a, []string{"serve", "--log-level=debug"}) {
		t.Errorf("server args %v", a)
	}
	if a := worker.Spec.Template.Spec.Containers[0].Args; !slices.Equal(a, []string{"worker", "--log-level=debug"}) {
		t.Errorf("worker args %v", a)
	}
	for name, spec := range map[string]corev1.PodSpec{"server": server.Spec.Template.Spec, "worker": worker.Spec.Template.Spec, "migrate": job.Spec.Template.Spec} {
		c := spec.Containers[0]
		if !slices.ContainsFunc(c.EnvFrom, func(e corev1.EnvFromSource) bool {
			return e.SecretRef != nil && e.SecretRef.Name == "gpuplane-extra-settings"
		}) {
			t.Errorf("%s: envFrom %+v lacks extraEnvFrom", name, c.EnvFrom)
		}
		if !mounted(spec, c, "/etc/gpuplane/db-ca/ca.crt") {
			t.Errorf("%s: extra volume db-ca not mounted", name)
		}
		psc, csc := spec.SecurityContext, c.SecurityContext
		if *psc.RunAsUser != 10001 || *csc.RunAsUser != 10001 || !*csc.ReadOnlyRootFilesystem || !*psc.RunAsNonRoot ||
			psc.SeccompProfile == nil || len(csc.Capabilities.Drop) != 1 {
			t.Errorf("%s: security contexts %+v / %+v: overrides must merge over the restricted defaults", name, psc, csc)
		}
	}

	// Probes: overridden readiness, default startup and liveness kept.
	c := server.Spec.Template.Spec.Containers[0]
	if c.ReadinessProbe.PeriodSeconds != 2 || c.ReadinessProbe.FailureThreshold != 5 || c.StartupProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("server probes: readiness %+v startup %+v liveness %+v", c.ReadinessProbe, c.StartupProbe, c.LivenessProbe)
	}
	if p := worker.Spec.Template.Spec.Containers[0].ReadinessProbe; p == nil || p.HTTPGet.Port.String() != "metrics" {
		t.Errorf("worker readiness probe %+v", p)
	}

	// HPA instead of replicas for the server; fixed replicas for the worker.
	if server.Spec.Replicas != nil {
		t.Errorf("server replicas %d next to an HPA", *server.Spec.Replicas)
	}
	if worker.Spec.Replicas == nil || *worker.Spec.Replicas != 3 {
		t.Errorf("worker replicas %v", worker.Spec.Replicas)
	}
	var hpa autoscalingv2.HorizontalPodAutoscaler
	convert(t, r.Find("HorizontalPodAutoscaler", "gp-server"), &hpa)
	targets := map[corev1.ResourceName]int32{}
	for _, m := range hpa.Spec.Metrics {
		targets[m.Resource.Name] = *m.Resource.Target.AverageUtilization
	}
	if hpa.Spec.ScaleTargetRef.Name != "gp-server" || *hpa.Spec.MinReplicas != 3 || hpa.Spec.MaxReplicas != 12 ||
		targets["cpu"] != 60 || targets["memory"] != 80 {
		t.Errorf("HPA %+v targets %v", hpa.Spec, targets)
	}
	if r.Find("HorizontalPodAutoscaler", "gp-worker") != nil {
		t.Error("worker HPA rendered though not enabled")
	}

	// NetworkPolicies.
	var api, metrics, migrate networkingv1.NetworkPolicy
	convert(t, r.Find("NetworkPolicy", "gp-server"), &api)
	convert(t, r.Find("NetworkPolicy", "gp-worker"), &metrics)
	convert(t, r.Find("NetworkPolicy", "gp-migrate"), &migrate)
	if len(api.Spec.Ingress) != 1 || len(api.Spec.Ingress[0].Ports) != 2 ||
		api.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "ingress-nginx" ||
		api.Spec.PodSelector.MatchLabels["app.kubernetes.io/component"] != "server" {
		t.Errorf("server NetworkPolicy %+v", api.Spec)
	}
	if len(metrics.Spec.Ingress) != 1 || metrics.Spec.Ingress[0].Ports[0].Port.String() != "metrics" ||
		metrics.Spec.Ingress[0].From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
		t.Errorf("worker NetworkPolicy %+v", metrics.Spec)
	}
	if len(migrate.Spec.Ingress) != 0 || !slices.Equal(migrate.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}) {
		t.Errorf("migrate NetworkPolicy %+v, want all ingress denied", migrate.Spec)
	}

	// ServiceMonitor: in the monitoring namespace, selecting the release's
	// two metrics Services through one endpoint (port "metrics").
	sm := r.OfKind("ServiceMonitor")[0]
	ns, _, _ := unstructured.NestedStringSlice(sm.Object, "spec", "namespaceSelector", "matchNames")
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if sm.GetNamespace() != "monitoring" || !slices.Equal(ns, []string{"gpuplane-system"}) || len(eps) != 1 {
		t.Errorf("ServiceMonitor in %s selecting %v with %d endpoints", sm.GetNamespace(), ns, len(eps))
	}
	for _, ep := range eps {
		rl, _, _ := unstructured.NestedSlice(ep.(map[string]any), "relabelings")
		mrl, _, _ := unstructured.NestedSlice(ep.(map[string]any), "metricRelabelings")
		if len(rl) != 1 || len(mrl) != 1 {
			t.Errorf("endpoint %v: relabelings %v metricRelabelings %v", ep, rl, mrl)
		}
	}

	// gRPC Ingress: every host, default path /.
	var grpc networkingv1.Ingress
	convert(t, r.Find("Ingress", "gp-grpc"), &grpc)
	var got []string
	for _, rule := range grpc.Spec.Rules {
		for _, p := range rule.HTTP.Paths {
			got = append(got, rule.Host+p.Path+" -> "+p.Backend.Service.Name+":"+p.Backend.Service.Port.Name)
		}
	}
	if want := []string{"grpc.gpuplane.example.com/ -> gp-grpc:grpc", "grpc.gpu.example.org/gpuplane.v1. -> gp-grpc:grpc"}; !slices.Equal(got, want) {
		t.Errorf("gRPC Ingress routes %v, want %v", got, want)
	}
	if !strings.Contains(r.Notes, "gRPC Ingress:   grpc.gpu.example.org") {
		t.Errorf("NOTES lack the second gRPC host:\n%s", r.Notes)
	}
}

// Off by default: no HPA, no NetworkPolicy, fixed replicas.
func TestChartConventionsOffByDefault(t *testing.T) {
	r := render(t, Options{})
	for _, kind := range []string{"HorizontalPodAutoscaler", "NetworkPolicy", "Ingress"} {
		if n := len(r.OfKind(kind)); n != 0 {
			t.Errorf("%d %s rendered by default", n, kind)
		}
	}
	if d := deployment(t, r, "gpuplane-server"); d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("server replicas %v, want 2", d.Spec.Replicas)
	}
	// An HPA without a target is refused with a message.
	_, err := Render(Options{Values: map[string]any{"worker": map[string]any{"autoscaling": map[string]any{
		"enabled": true, "targetCPUUtilizationPercentage": nil}}}})
	if err == nil || !strings.Contains(err.Error(), "worker.autoscaling: set targetCPUUtilizationPercentage") {
		t.Errorf("HPA without targets: %v", err)
	}
}
