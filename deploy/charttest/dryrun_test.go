package charttest

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/restmapper"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpuplane/gpuplane/internal/envtestenv"
)

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	code := m.Run()
	if apiServer.env != nil {
		_ = apiServer.env.Stop()
	}
	os.Exit(code)
}

var apiServer struct {
	once sync.Once
	env  *envtestenv.Env
	err  error
}

// serviceMonitorCRD is a test fixture written for these tests (not the
// Prometheus Operator's CRD): just enough of monitoring.coreos.com/v1
// ServiceMonitor for the API server to store one, with a structural schema
// for the fields the chart sets, so that strict field validation catches a
// misspelt field in the template.
const serviceMonitorCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: servicemonitors.monitoring.coreos.com
spec:
  group: monitoring.coreos.com
  scope: Namespaced
  names:
    kind: ServiceMonitor
    listKind: ServiceMonitorList
    plural: servicemonitors
    singular: servicemonitor
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          required: [spec]
          properties:
            apiVersion: {type: string}
            kind: {type: string}
            metadata: {type: object}
            spec:
              type: object
              required: [selector]
              properties:
                jobLabel: {type: string}
                selector:
                  type: object
                  properties:
                    matchLabels:
                      type: object
                      additionalProperties: {type: string}
                    matchExpressions:
                      type: array
                      items:
                        type: object
                        required: [key, operator]
                        properties:
                          key: {type: string}
                          operator: {type: string}
                          values: {type: array, items: {type: string}}
                namespaceSelector:
                  type: object
                  properties:
                    any: {type: boolean}
                    matchNames: {type: array, items: {type: string}}
                endpoints:
                  type: array
                  items:
                    type: object
                    properties:
                      port: {type: string}
                      targetPort: {x-kubernetes-int-or-string: true}
                      path: {type: string}
                      scheme: {type: string, enum: [http, https]}
                      interval: {type: string, pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$'}
                      scrapeTimeout: {type: string, pattern: '^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$'}
                      honorLabels: {type: boolean}
                      relabelings: ` + relabelConfigs + `
                      metricRelabelings: ` + relabelConfigs + "\n"

// relabelConfigs is the schema of a Prometheus relabel_config list, for
// both relabelings and metricRelabelings.
const relabelConfigs = `
                        type: array
                        items:
                          type: object
                          properties:
                            sourceLabels: {type: array, items: {type: string}}
                            separator: {type: string}
                            targetLabel: {type: string}
                            regex: {type: string}
                            modulus: {type: integer}
                            replacement: {type: string}
                            action: {type: string, enum: [replace, keep, drop, keepequal, dropequal, hashmod, labelmap, labeldrop, labelkeep, lowercase, uppercase]}`

// startAPIServer fails (never skips) without the envtest binaries.
func startAPIServer(t *testing.T) *envtestenv.Env {
	t.Helper()
	envtestenv.SkipIfShort(t)
	apiServer.once.Do(func() {
		dir, err := os.MkdirTemp("", "gpuplane-charttest-crds-")
		if err != nil {
			apiServer.err = err
			return
		}
		if apiServer.err = os.WriteFile(filepath.Join(dir, "servicemonitors.yaml"), []byte(serviceMonitorCRD), 0o644); apiServer.err != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		apiServer.env, apiServer.err = envtestenv.Start(ctx, envtestenv.Options{CRDDirs: []string{dir}})
	})
	if apiServer.err != nil {
		t.Fatalf("real API server needed: %v", apiServer.err)
	}
	return apiServer.env
}

// warnings collects the API server's Warning headers (Pod Security answers
// a workload that would violate the namespace's level with one).
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

// TestServerSideDryRun applies every object of both renders to a real API
// server with server-side apply, dry-run and strict field validation, in a
// namespace that enforces the restricted Pod Security level: all must be
// accepted without a warning, and a Pod made from each pod template must be
// admitted.
func TestServerSideDryRun(t *testing.T) {
	env := startAPIServer(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cfg := env.RESTConfig()
	warn := &warnings{}
	cfg.WarningHandler = warn
	kube := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))

	const ns = "gpuplane-system"
	restricted := map[string]string{}
	for _, mode := range []string{"enforce", "warn", "audit"} {
		restricted["pod-security.kubernetes.io/"+mode] = "restricted"
		restricted["pod-security.kubernetes.io/"+mode+"-version"] = "latest"
	}
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: restricted}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The full values put the ServiceMonitor where Prometheus looks.
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "monitoring"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	// The full values name this PriorityClass; pods naming a missing one are refused.
	if _, err := kube.SchedulingV1().PriorityClasses().Create(ctx, &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "gpuplane"}, Value: 1000}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	warn.take()

	for name, r := range renders(t) {
		t.Run(name, func(t *testing.T) {
			if name == "full" && len(r.OfKind("ServiceMonitor")) != 1 {
				t.Fatal("the full render has no ServiceMonitor to apply")
			}
			for _, o := range r.Objects {
				key := Key(o)
				gvk := o.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Errorf("%s: the API server does not serve %s: %v", key, gvk, err)
					continue
				}
				data, err := json.Marshal(o.Object)
				if err != nil {
					t.Fatal(err)
				}
				res := dyn.Resource(m.Resource)
				var ri dynamic.ResourceInterface = res
				if m.Scope.Name() == "namespace" {
					if o.GetNamespace() != ns && (o.GetKind() != "ServiceMonitor" || o.GetNamespace() != "monitoring") {
						t.Errorf("%s: namespaced object outside the release namespace", key)
					}
					ri = res.Namespace(o.GetNamespace())
				} else if o.GetNamespace() != "" {
					t.Errorf("%s: cluster-scoped object with a namespace", key)
				}
				_, err = ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
					FieldManager: "helm", Force: ptr(true),
					DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict",
				})
				if err != nil {
					t.Errorf("%s refused: %v", key, err)
				}
				if w := warn.take(); len(w) > 0 {
					t.Errorf("%s: warnings %q", key, w)
				}
			}
			for owner, spec := range podSpecs(t, r) {
				pod := &corev1.Pod{
					ObjectMeta: metav1.ObjectMeta{Name: "dryrun-" + strings.ToLower(strings.ReplaceAll(owner, "/", "-")), Namespace: ns},
					Spec:       spec,
				}
				if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
					t.Errorf("a pod of %s is refused in a restricted namespace: %v", owner, err)
				}
				if w := warn.take(); len(w) > 0 {
					t.Errorf("a pod of %s: warnings %q", owner, w)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
