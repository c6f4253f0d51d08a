package hostcluster

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	rcommon "helm.sh/helm/v4/pkg/release/common"

	"github.com/gpuplane/gpuplane/internal/quota"
)

// FieldManager owns every field gpuplane writes with server-side apply.
const FieldManager = "gpuplane"

// Options configures a Client.
type Options struct {
	Settings Settings
	// Logger receives Helm's and the client's logs; nil discards them.
	Logger *slog.Logger
	// TracerProvider, when set, traces Apply's steps and every request to
	// the API server (made within a traced context) as OpenTelemetry spans.
	TracerProvider trace.TracerProvider
}

// Client applies and observes virtual clusters on one host cluster. It is
// safe for concurrent use, but callers must not run two operations on the
// same virtual cluster at once (Helm allows one operation per release).
type Client struct {
	config    *rest.Config
	kube      kubernetes.Interface
	dyn       dynamic.Interface
	meta      metadata.Interface
	discovery discovery.CachedDiscoveryInterface
	mapper    meta.RESTMapper
	settings  Settings
	log       *slog.Logger
	tracer    trace.Tracer

	chartMu sync.Mutex
	charts  map[string]*loadedChart

	mapMu        sync.Mutex
	mapSupported *bool

	// appliedMu guards applied and verified (applied.go).
	appliedMu sync.Mutex
	// applied is what the last successful Apply of each virtual cluster
	// left on the host, by virtual cluster name.
	applied map[string]appliedRecord
	// verified holds, by virtual cluster name, the combination of shared
	// guardrail objects and namespace parameters whose enforcement a probe
	// showed (applyGuardrails).
	verified map[string]string

	// guardMu serialises applying the shared guardrails; guardApplied are
	// the versions this Client last applied (nil: none yet).
	guardMu      sync.Mutex
	guardApplied map[string]string

	// cacheMu guards cache (the watch caches, cache.go; nil until first
	// used) and closed.
	cacheMu sync.Mutex
	cache   *hostCaches
	closed  bool

	// virtualMu guards virtual: by virtual cluster, the client of its API
	// server and the admin kubeconfig Secret version it was built from.
	virtualMu sync.Mutex
	virtual   map[string]virtualConn
}

// New builds a Client. It does not contact the API server.
func New(config *rest.Config, opts Options) (*Client, error) {
	config = rest.CopyConfig(config)
	if config.UserAgent == "" {
		config.UserAgent = "gpuplane"
	}
	tracer := traceTransport(config, opts.TracerProvider)
	kube, err := kubernetes.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("hostcluster: %w", err)
	}
	dyn, err := dynamic.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("hostcluster: %w", err)
	}
	md, err := metadata.NewForConfig(config)
	if err != nil {
		return nil, fmt.Errorf("hostcluster: %w", err)
	}
	dc, mapper, err := newDiscovery(config)
	if err != nil {
		return nil, fmt.Errorf("hostcluster: %w", err)
	}
	if err := opts.Settings.ValidateProfiles(); err != nil {
		return nil, err
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Client{
		config:    config,
		kube:      kube,
		dyn:       dyn,
		meta:      md,
		discovery: dc,
		mapper:    mapper,
		settings:  opts.Settings.withDefaults(),
		log:       log,
		tracer:    tracer,
		charts:    map[string]*loadedChart{},
		applied:   map[string]appliedRecord{},
		verified:  map[string]string{},
		virtual:   map[string]virtualConn{},
	}, nil
}

// Settings returns the effective settings (defaults filled in).
func (c *Client) Settings() Settings { return c.settings }

// Step names one stage of Apply, in order.
type Step string

// Apply's steps, in the order they run. Each depends on the ones before it.
const (
	StepNamespace     Step = "Namespace"
	StepQueues        Step = "Queues"
	StepGuardrails    Step = "Guardrails"
	StepNetworkPolicy Step = "NetworkPolicy"
	StepRelease       Step = "Release"
	// StepTenantAccess applies the team's RBAC inside the virtual cluster
	// once its control plane is up (tenantaccess.go).
	StepTenantAccess Step = "TenantAccess"
)

// StepResult is the outcome of one step; a caller turns it into a condition.
type StepResult struct {
	Step   Step
	Err    error  // nil on success
	Detail string // human-readable summary of what the step did
	// Duration is how long the step took.
	Duration time.Duration
}

// Steps are the results of the steps Apply ran, stopping after the first
// failure.
type Steps []StepResult

// Failed returns the failed step, if any.
func (s Steps) Failed() (StepResult, bool) {
	for _, r := range s {
		if r.Err != nil {
			return r, true
		}
	}
	return StepResult{}, false
}

// Of returns the result of one step, if it ran.
func (s Steps) Of(step Step) (StepResult, bool) {
	for _, r := range s {
		if r.Step == step {
			return r, true
		}
	}
	return StepResult{}, false
}

// Apply converges the host cluster on vc: namespace, queues (parents first),
// admission guardrails, network policy, then the vCluster release. Every
// object is written with server-side apply and Force, so hand edits of
// fields gpuplane owns are reverted. It stops at the first failing step
// (later steps depend on earlier ones) and returns the results so far.
func (c *Client) Apply(ctx context.Context, vc VirtualCluster) (Steps, error) {
	if err := vc.Validate(); err != nil {
		return nil, err
	}
	var steps Steps
	run := func(step Step, f func(ctx context.Context) (string, error)) error {
		sctx, span := c.tracer.Start(ctx, "hostcluster.Apply "+string(step))
		start := time.Now()
		detail, err := f(sctx)
		steps = append(steps, StepResult{Step: step, Err: err, Detail: detail, Duration: time.Since(start)})
		endSpan(span, err)
		if err != nil {
			return fmt.Errorf("hostcluster: apply %s of virtual cluster %s: %w", step, vc.Name, err)
		}
		return nil
	}
	apply := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	// versions of what this Apply wrote, remembered when it succeeds
	// (applied.go).
	versions := map[string]string{}

	// The guardrails' parameters go on the namespace (RenderNamespace), so
	// everything they depend on is known first: whether the server has
	// mutating policies, and for a tier with its own scheduler the nodes of
	// its slice.
	var mutating bool
	var params map[string]string
	if err := run(StepNamespace, func(ctx context.Context) (string, error) {
		var err error
		if mutating, err = c.MutatingAdmissionPolicySupported(); err != nil {
			return "", err
		}
		if c.settings.Profile(vc.Tier).OwnScheduler {
			nodes, err := c.sliceNodes(ctx, vc)
			if err != nil {
				return "", err
			}
			vc.SliceNodes = nodes
		}
		params = GuardrailParams(vc, c.settings, mutating)
		ns, err := c.kube.CoreV1().Namespaces().Apply(ctx, RenderNamespace(vc, c.settings, params), apply)
		if err != nil {
			return "", err
		}
		if ns.DeletionTimestamp != nil {
			return "", fmt.Errorf("namespace %s is being deleted; retry once it is gone", ns.Name)
		}
		c.wrote(namespacesGVR, ns)
		versions[versionNamespace] = objectVersion(ns.UID, ns.ResourceVersion)
		return "namespace " + ns.Name, nil
	}); err != nil {
		return steps, err
	}

	if err := run(StepQueues, func(ctx context.Context) (string, error) {
		var names []string
		for _, q := range RenderQueues(vc, c.settings) {
			have, err := c.dyn.Resource(QueueGVR).Apply(ctx, q.GetName(), q, apply)
			if err != nil {
				return strings.Join(names, ", "), fmt.Errorf("queue %s: %w", q.GetName(), err)
			}
			c.wrote(QueueGVR, have)
			versions[queueVersionKey(have.GetName())] = specVersion(have.GetUID(), have.GetGeneration())
			names = append(names, q.GetName())
		}
		return "queues " + strings.Join(names, " > "), nil
	}); err != nil {
		return steps, err
	}

	if err := run(StepGuardrails, func(ctx context.Context) (string, error) {
		return c.applyGuardrails(ctx, vc, params, mutating, versions)
	}); err != nil {
		return steps, err
	}

	if err := run(StepNetworkPolicy, func(ctx context.Context) (string, error) {
		np, err := c.kube.NetworkingV1().NetworkPolicies(NamespaceName(vc.Name)).Apply(ctx, RenderNetworkPolicy(vc, c.settings), apply)
		if err != nil {
			return "", err
		}
		c.wrote(networkPoliciesGVR, np)
		versions[versionNetpol] = specVersion(np.UID, np.Generation)
		return "network policy " + np.Name, nil
	}); err != nil {
		return steps, err
	}

	if err := run(StepRelease, func(ctx context.Context) (string, error) {
		r, err := c.EnsureRelease(ctx, vc)
		if err != nil {
			return "", err
		}
		versions[versionRelease] = releaseStateVersion(&ReleaseState{Status: string(rcommon.StatusDeployed), Revision: r.Revision, ValuesHash: r.ValuesHash})
		if r.Action != "unchanged" {
			if err := c.readReleased(ctx, vc); err != nil {
				return "", err
			}
		}
		if err := c.checkControlPlaneAdmitted(ctx, vc); err != nil {
			return "", err
		}
		detail := fmt.Sprintf("release %s %s (revision %d)", ReleaseName(vc.Name), r.Action, r.Revision)
		if vc.Sleep {
			n, err := c.removeWorkloadPods(ctx, vc)
			if err != nil {
				return detail, err
			}
			detail += fmt.Sprintf(", asleep: control plane scaled to zero, %d workload pods removed", n)
		}
		return detail, nil
	}); err != nil {
		return steps, err
	}

	if err := run(StepTenantAccess, func(ctx context.Context) (string, error) {
		if vc.Sleep {
			return "skipped: asleep (its API server is not running)", nil
		}
		return c.applyTenantAccess(ctx, vc)
	}); err != nil {
		return steps, err
	}
	desired, err := c.fingerprint(ctx, vc, mutating)
	if err != nil {
		return steps, err
	}
	c.remember(vc.Name, desired, versions)
	return steps, nil
}

// readReleased reads the control plane StatefulSet and Service a Helm
// install or upgrade just wrote, through Helm's own client, and has the
// watch caches wait for these versions (Client.wrote): the checks and the
// Observe that follow see the release as installed, not as it was.
func (c *Client) readReleased(ctx context.Context, vc VirtualCluster) error {
	ns, name := NamespaceName(vc.Name), ReleaseName(vc.Name)
	sts, err := c.kube.AppsV1().StatefulSets(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		c.wrote(statefulSetsGVR, sts)
	case !apierrors.IsNotFound(err):
		return err
	}
	svc, err := c.kube.CoreV1().Services(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case err == nil:
		c.wrote(servicesGVR, svc)
	case !apierrors.IsNotFound(err):
		return err
	}
	return nil
}

// checkControlPlaneAdmitted dry-runs the vCluster control plane pod (the
// StatefulSet's template) in the host namespace, so that a Pod Security
// level the chart's pods do not meet (the tier's "restricted" with a
// control plane running as root) fails the release step with the reason,
// instead of a StatefulSet whose pods the API server silently refuses.
// Other refusals (an unobserved ResourceQuota, say) are not conclusive and
// are left to the StatefulSet controller.
func (c *Client) checkControlPlaneAdmitted(ctx context.Context, vc VirtualCluster) error {
	ns := NamespaceName(vc.Name)
	sts, ok, err := c.cachedStatefulSet(ctx, vc.Name)
	if err != nil || !ok {
		return err
	}
	// As the StatefulSet controller builds pod 0: the template plus a
	// volume per claim template.
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: sts.Name + "-0", Labels: sts.Spec.Template.Labels, Annotations: sts.Spec.Template.Annotations},
		Spec:       *sts.Spec.Template.Spec.DeepCopy(),
	}
	for _, claim := range sts.Spec.VolumeClaimTemplates {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: claim.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim.Name + "-" + pod.Name}}})
	}
	_, err = c.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil && apierrors.IsForbidden(err) && strings.Contains(err.Error(), "violates PodSecurity") {
		return fmt.Errorf("the vCluster control plane pod cannot run in namespace %s, which enforces Pod Security %q for tier %s: %w",
			ns, c.settings.Profile(vc.Tier).PodSecurity, vc.Tier, err)
	}
	return nil
}

// restrictedPodSpec is one container that meets Pod Security "restricted".
func restrictedPodSpec(container, image string) corev1.PodSpec {
	return corev1.PodSpec{
		SecurityContext: &corev1.PodSecurityContext{
			RunAsNonRoot:   ptr.To(true),
			SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
		},
		Containers: []corev1.Container{{
			Name: container, Image: image,
			SecurityContext: &corev1.SecurityContext{
				AllowPrivilegeEscalation: ptr.To(false),
				Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
			},
		}},
	}
}

// MutatingAdmissionPolicySupported reports whether the server serves
// admissionregistration.k8s.io/v1 MutatingAdmissionPolicy (GA and on by
// default from Kubernetes 1.36). The answer is cached for the Client's life.
func (c *Client) MutatingAdmissionPolicySupported() (bool, error) {
	c.mapMu.Lock()
	defer c.mapMu.Unlock()
	if c.mapSupported != nil {
		return *c.mapSupported, nil
	}
	list, err := c.discovery.ServerResourcesForGroupVersion("admissionregistration.k8s.io/v1")
	if err != nil && !apierrors.IsNotFound(err) {
		return false, fmt.Errorf("discover admission policy APIs: %w", err)
	}
	supported := false
	if list != nil {
		supported = slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool {
			return r.Name == "mutatingadmissionpolicies"
		})
	}
	c.mapSupported = &supported
	return supported, nil
}

// QueueState is what Observe found for one queue.
type QueueState struct {
	Name   string
	Level  string // LevelDepartment, LevelTeam or LevelLeaf
	Exists bool
	// Drift lists fields whose live value differs from the desired one,
	// e.g. "resources.gpu.quota: want 2, have 3".
	Drift []string
}

// InSync reports whether the queue exists and matches the desired spec.
func (q QueueState) InSync() bool { return q.Exists && len(q.Drift) == 0 }

// ReleaseState is the last revision of the Helm release.
type ReleaseState struct {
	Status     string // Helm status: deployed, failed, pending-install, ...
	Revision   int
	ValuesHash string
}

// Observed is the live state of one virtual cluster on the host.
type Observed struct {
	NamespaceExists bool
	// Queues in hierarchy order: department, team, leaf.
	Queues []QueueState
	// GuardrailsPresent: the validating policy and binding exist, and the
	// mutating ones too where the server supports them.
	GuardrailsPresent bool
	// GuardrailWarnings are CEL type-check warnings the API server reported
	// on the policies (normally empty).
	GuardrailWarnings    []string
	NetworkPolicyPresent bool
	Release              *ReleaseState // nil: no release
	// ReleaseUpToDate: deployed with exactly the values and chart Apply
	// would install now.
	ReleaseUpToDate bool
	// ControlPlaneReady: the vCluster StatefulSet has a ready replica.
	ControlPlaneReady bool
	// KubeconfigSecretPresent: vCluster has written Secret vc-<name>.
	KubeconfigSecretPresent bool
	// TenantAccess is the team's RBAC inside the virtual cluster.
	TenantAccess TenantAccessState
	// Endpoint is the member-facing URL of the virtual API server, from the
	// control plane Service as observed (Settings.Exposure); "" while it is
	// not known (no Service yet, or no load balancer address).
	Endpoint string
	// Allocated is the leaf queue's status.allocated; nil when KAI has not
	// reported one.
	Allocated *Quantities
	// ControlPlaneStopped: the vCluster StatefulSet is scaled to zero and
	// no replica runs (a sleeping virtual cluster).
	ControlPlaneStopped bool
	// WorkloadPods counts the pods the syncer created in the host
	// namespace (label vcluster.loft.sh/managed-by=<release>) that are not
	// already terminating; counted for a sleeping virtual cluster only
	// (what Asleep needs), 0 otherwise.
	WorkloadPods int

	// versions of the objects Apply writes, as read (applied.go).
	versions map[string]string
}

// Asleep reports whether the host shows vc asleep: everything Apply keeps
// while asleep is present and in sync (the leaf queue at limit 0), the
// control plane is stopped and no workload pod is left.
func (o Observed) Asleep() bool {
	return o.NamespaceExists && o.QueuesInSync() && o.GuardrailsPresent && o.NetworkPolicyPresent &&
		o.ReleaseDeployed() && o.ReleaseUpToDate && o.ControlPlaneStopped && o.WorkloadPods == 0
}

// QueuesInSync reports whether every queue exists and matches.
func (o Observed) QueuesInSync() bool {
	for _, q := range o.Queues {
		if !q.InSync() {
			return false
		}
	}
	return len(o.Queues) > 0
}

// ReleaseDeployed reports whether the last release revision is deployed.
func (o Observed) ReleaseDeployed() bool {
	return o.Release != nil && o.Release.Status == "deployed"
}

// Ready reports whether everything Apply manages is present and in sync
// and the control plane is up.
func (o Observed) Ready() bool {
	return o.NamespaceExists && o.QueuesInSync() && o.GuardrailsPresent && o.NetworkPolicyPresent &&
		o.ReleaseDeployed() && o.ReleaseUpToDate && o.ControlPlaneReady && o.KubeconfigSecretPresent &&
		o.Endpoint != "" && o.TenantAccessInSync()
}

// TenantAccessInSync reports whether the team's RBAC inside the virtual
// cluster is as desired (always true where it does not apply).
func (o Observed) TenantAccessInSync() bool {
	return !o.TenantAccess.Applicable || o.TenantAccess.InSync
}

// Observe reads the state of vc on the host. Missing objects are
// reported, not returned as errors; errors mean the host cluster could not
// be read. It reads from the Client's watch caches (cache.go), which
// follow the API server and hold what this Client wrote, so an Observe
// after an Apply sees the Apply's writes; it makes requests only for what
// no watch covers: the workload pods of a sleeping virtual cluster, an
// admin kubeconfig Secret vCluster did not label (chart 0.20), the team's
// RBAC inside the virtual cluster, and the nodes of a tier with its own
// scheduler.
func (c *Client) Observe(ctx context.Context, vc VirtualCluster) (Observed, error) {
	if err := vc.Validate(); err != nil {
		return Observed{}, err
	}
	var o Observed
	ns := NamespaceName(vc.Name)

	o.versions = map[string]string{}
	nsObj, ok, err := c.cachedMeta(ctx, namespacesGVR, "", ns)
	if err != nil {
		return o, err
	}
	o.NamespaceExists = ok
	if ok {
		o.versions[versionNamespace] = objectVersion(nsObj.UID, nsObj.ResourceVersion)
	}

	for _, want := range RenderQueues(vc, c.settings) {
		level, _, _ := unstructured.NestedString(want.Object, "metadata", "labels", LabelQueueLevel)
		qs := QueueState{Name: want.GetName(), Level: level}
		have, ok, err := c.cachedQueue(ctx, want.GetName())
		if err != nil {
			return o, err
		}
		qs.Exists = ok
		if ok {
			o.versions[queueVersionKey(qs.Name)] = specVersion(have.GetUID(), have.GetGeneration())
			qs.Drift = queueDrift(want, have)
			if level == LevelLeaf {
				o.Allocated = parseAllocated(have)
			}
		}
		o.Queues = append(o.Queues, qs)
	}

	if !o.NamespaceExists {
		return o, nil
	}
	mutating, err := c.MutatingAdmissionPolicySupported()
	if err != nil {
		return o, err
	}
	if err := c.observeGuardrails(ctx, vc, mutating, nsObj.Labels, nsObj.Annotations, &o); err != nil {
		return o, err
	}

	np, ok, err := c.cachedMeta(ctx, networkPoliciesGVR, ns, NetworkPolicyName)
	if err != nil {
		return o, err
	}
	if o.NetworkPolicyPresent = ok; ok {
		o.versions[versionNetpol] = specVersion(np.UID, np.Generation)
	}

	if o.Release, err = c.releaseFromLabels(ctx, vc.Name); err != nil {
		return o, fmt.Errorf("hostcluster: read release: %w", err)
	}
	if o.Release != nil {
		o.versions[versionRelease] = releaseStateVersion(o.Release)
		want, err := c.desiredValuesHash(ctx, vc)
		if err != nil {
			return o, err
		}
		o.ReleaseUpToDate = o.ReleaseDeployed() && o.Release.ValuesHash == want
	}

	sts, ok, err := c.cachedStatefulSet(ctx, vc.Name)
	if err != nil {
		return o, err
	}
	if ok {
		o.ControlPlaneReady = statefulSetReady(sts)
		o.ControlPlaneStopped = sts.Spec.Replicas != nil && *sts.Spec.Replicas == 0 && sts.Status.Replicas == 0
	}
	if vc.Sleep {
		// Its API server is not running: no endpoint, nothing to read
		// inside; what is left is whether its workload pods are gone (a
		// list, for sleeping virtual clusters only: a watch of every
		// tenant pod on the host would cost more than it saves).
		pods, err := c.meta.Resource(podsGVR).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: workloadPodSelector(vc)})
		if err != nil {
			return o, err
		}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil { // terminating ones are the kubelet's to finish
				o.WorkloadPods++
			}
		}
		return o, nil
	}
	secret, err := c.kubeconfigSecret(ctx, vc.Name)
	if err != nil {
		return o, err
	}
	o.KubeconfigSecretPresent = secret != nil
	if o.Endpoint, err = c.observeEndpoint(ctx, vc); err != nil {
		return o, err
	}
	if o.TenantAccess, err = c.observeTenantAccess(ctx, vc); err != nil {
		return o, err
	}
	return o, nil
}

// podsGVR is for metadata-only lists of workload pods.
var podsGVR = schema.GroupVersionResource{Version: "v1", Resource: "pods"}

// sliceNodes are the names of the nodes in vc's pool (label
// <pool label>=<pool>), sorted: the only nodes a virtual cluster with its
// own scheduler may bind pods to.
func (c *Client) sliceNodes(ctx context.Context, vc VirtualCluster) ([]string, error) {
	list, err := c.kube.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: c.settings.withDefaults().PoolLabel + "=" + vc.pool()})
	if err != nil {
		return nil, fmt.Errorf("list the nodes of slice %s: %w", vc.pool(), err)
	}
	out := make([]string, 0, len(list.Items))
	for _, n := range list.Items {
		out = append(out, n.Name)
	}
	slices.Sort(out)
	return out, nil
}

// workloadPodSelector matches the pods vc's syncer created on the host.
func workloadPodSelector(vc VirtualCluster) string {
	return vclusterMarkerLabel + "=" + ReleaseName(vc.Name)
}

// removeWorkloadPods deletes the pods vc's syncer created on the host (a
// sleeping virtual cluster's syncer is stopped and would not), returning
// how many were there. The control plane's own pods are the
// StatefulSet's and are not matched.
func (c *Client) removeWorkloadPods(ctx context.Context, vc VirtualCluster) (int, error) {
	ns := NamespaceName(vc.Name)
	pods, err := c.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: workloadPodSelector(vc)})
	if err != nil {
		return 0, fmt.Errorf("list workload pods: %w", err)
	}
	for _, p := range pods.Items {
		if err := c.kube.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("remove workload pod %s: %w", p.Name, err)
		}
	}
	return len(pods.Items), nil
}

func statefulSetReady(sts *appsv1.StatefulSet) bool {
	return sts.Status.ReadyReplicas >= 1
}

func (c *Client) desiredValuesHash(ctx context.Context, vc VirtualCluster) (string, error) {
	lc, err := c.loadChart(ctx, vc.ChartVersion)
	if err != nil {
		return "", err
	}
	values, err := jsonRoundTrip(RenderVClusterValues(vc, c.settings))
	if err != nil {
		return "", err
	}
	return valuesHash(values, lc.digest), nil
}

// queueDrift compares the fields gpuplane sets on a queue.
func queueDrift(want, have *unstructured.Unstructured) []string {
	var drift []string
	str := func(path ...string) {
		w, _, _ := unstructured.NestedString(want.Object, append([]string{"spec"}, path...)...)
		h, _, _ := unstructured.NestedString(have.Object, append([]string{"spec"}, path...)...)
		if w != h {
			drift = append(drift, fmt.Sprintf("%s: want %q, have %q", strings.Join(path, "."), w, h))
		}
	}
	num := func(path ...string) {
		w, wok := nestedNumber(want.Object, append([]string{"spec"}, path...)...)
		h, hok := nestedNumber(have.Object, append([]string{"spec"}, path...)...)
		switch {
		case !wok && !hok:
		case wok != hok:
			drift = append(drift, fmt.Sprintf("%s: want %s, have %s", strings.Join(path, "."), fmtNumber(w, wok), fmtNumber(h, hok)))
		case math.Abs(w-h) > 1e-9:
			drift = append(drift, fmt.Sprintf("%s: want %s, have %s", strings.Join(path, "."), fmtNumber(w, true), fmtNumber(h, true)))
		}
	}
	str("parentQueue")
	num("priority")
	for _, r := range []string{"gpu", "cpu", "memory"} {
		for _, f := range []string{"quota", "overQuotaWeight", "limit"} {
			num("resources", r, f)
		}
	}
	return drift
}

func fmtNumber(v float64, ok bool) string {
	if !ok {
		return "unset"
	}
	return fmt.Sprint(v)
}

func nestedNumber(obj map[string]any, path ...string) (float64, bool) {
	v, found, err := unstructured.NestedFieldNoCopy(obj, path...)
	if !found || err != nil {
		return 0, false
	}
	switch n := v.(type) {
	case int64:
		return float64(n), true
	case float64:
		return n, true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	}
	return 0, false
}

// parseAllocated reads a queue's status.allocated.
//
// UNIT CONVERSION, KAI allocated -> platform. KAI's queue controller fills
// status.allocated with the summed requests of the queue's running pods as
// an ordinary Kubernetes resource list (pkg/queuecontroller: cpu in cores,
// memory in bytes, GPUs in devices under a name ending in "/gpu", e.g.
// "nvidia.com/gpu": "1500m"), not in the queue units of spec.resources.
// The exact decimal amounts go to quota.AllocatedFromKAI, the one place
// that rounds them UP to the platform's units, so usage is never
// understated.
func parseAllocated(q *unstructured.Unstructured) *Quantities {
	raw, found, err := unstructured.NestedMap(q.Object, "status", "allocated")
	if !found || err != nil {
		return nil
	}
	var gpu, cpu, memory quota.Decimal
	for name, v := range raw {
		var qty resource.Quantity
		switch x := v.(type) {
		case string:
			p, err := resource.ParseQuantity(x)
			if err != nil {
				continue
			}
			qty = p
		case int64:
			qty = *resource.NewQuantity(x, resource.DecimalSI)
		case float64:
			// The shortest decimal that reads back as x, parsed exactly.
			p, err := resource.ParseQuantity(strconv.FormatFloat(x, 'f', -1, 64))
			if err != nil {
				continue
			}
			qty = p
		default:
			continue
		}
		dec := qty.AsDec()
		amount := quota.Decimal{Unscaled: dec.UnscaledBig(), Exponent: -int32(dec.Scale())}
		switch {
		case name == string(corev1.ResourceCPU):
			cpu = amount
		case name == string(corev1.ResourceMemory):
			memory = amount
		case name == "gpu" || strings.HasSuffix(name, "/gpu"):
			gpu = amount
		}
	}
	r := quota.AllocatedFromKAI(gpu, cpu, memory)
	return &Quantities{GPUCenti: int64(r.GPU), CPUMillis: r.CPUMillis, MemoryBytes: r.MemoryBytes}
}

// DeletePendingError reports a Delete that removed everything it could but
// must wait for KAI before removing parent queues. It is not a failure:
// call Delete again later.
type DeletePendingError struct {
	// Waiting says what is awaited, one entry per queue.
	Waiting []string
}

func (e *DeletePendingError) Error() string {
	return "hostcluster: delete waits for KAI: " + strings.Join(e.Waiting, "; ")
}

// Delete removes everything Apply created for vc: the release, the
// guardrails, the network policy, the leaf queue, the namespace, and the
// team and department queues once nothing else needs them. It is
// idempotent: objects already gone count as deleted. It does not wait for
// the namespace to finish terminating.
//
// Parent queues go last and only when
//   - no other live queue names them as parent (other virtual clusters of
//     the team, other teams of the department keep them), and
//   - KAI's status no longer lists any child in status.childQueues: KAI's
//     webhook refuses to delete a queue while it does, and its queue
//     controller updates that list only after the child is gone.
//
// Until then Delete returns a *DeletePendingError and the caller retries.
// Parents are only checked, not locked: a concurrent Apply of a sibling in
// the same team could recreate a parent just deleted, which its next Apply
// repairs.
func (c *Client) Delete(ctx context.Context, vc VirtualCluster) error {
	if err := vc.Validate(); err != nil {
		return err
	}
	// Whatever its last Apply wrote is going away: no resync may skip on
	// its record, and the record must not outlive the virtual cluster.
	c.forget(vc.Name)
	gone := func(err error) error {
		if err == nil || apierrors.IsNotFound(err) {
			return nil
		}
		return err
	}
	var del metav1.DeleteOptions
	ns := NamespaceName(vc.Name)

	if _, ok, err := c.cachedMeta(ctx, namespacesGVR, "", ns); err != nil {
		return fmt.Errorf("hostcluster: delete %s: %w", vc.Name, err)
	} else if ok {
		if err := c.UninstallRelease(ctx, vc.Name); err != nil {
			return err
		}
	}

	// The shared guardrails stay for the other virtual clusters; objects of
	// the per-virtual-cluster design go with their virtual cluster.
	if _, err := c.removeLegacyGuardrails(ctx, vc.Name); err != nil {
		return fmt.Errorf("hostcluster: delete %s: %w", vc.Name, err)
	}
	type deletion struct {
		what string
		f    func() error
	}
	var deletes []deletion
	deletes = append(deletes,
		deletion{"network policy", func() error {
			return c.kube.NetworkingV1().NetworkPolicies(ns).Delete(ctx, NetworkPolicyName, del)
		}},
		deletion{"leaf queue", func() error { return c.dyn.Resource(QueueGVR).Delete(ctx, LeafQueueName(vc.Name), del) }},
		deletion{"namespace", func() error { return c.kube.CoreV1().Namespaces().Delete(ctx, ns, del) }},
	)
	for _, d := range deletes {
		if err := gone(d.f()); err != nil {
			return fmt.Errorf("hostcluster: delete %s of %s: %w", d.what, vc.Name, err)
		}
	}
	return c.deleteParentQueues(ctx, vc)
}

// deleteParentQueues deletes the team queue, then the department queue,
// each only when nothing needs it any more (see Delete).
func (c *Client) deleteParentQueues(ctx context.Context, vc VirtualCluster) error {
	queues := c.dyn.Resource(QueueGVR)
	rendered := RenderQueues(vc, c.settings)
	var parents []string // nearest first: team, then department
	for i := len(rendered) - 2; i >= 0; i-- {
		parents = append(parents, rendered[i].GetName())
	}
	for _, parent := range parents {
		list, err := queues.List(ctx, metav1.ListOptions{})
		if err != nil {
			return fmt.Errorf("hostcluster: list queues: %w", err)
		}
		var q *unstructured.Unstructured
		inUse := false
		for i := range list.Items {
			item := &list.Items[i]
			if item.GetName() == parent {
				q = item
			}
			p, _, _ := unstructured.NestedString(item.Object, "spec", "parentQueue")
			inUse = inUse || (p == parent && item.GetDeletionTimestamp() == nil)
		}
		if inUse {
			return nil // a parent still in use keeps its own parent in use too
		}
		if q == nil {
			continue // already gone
		}
		if children, _, _ := unstructured.NestedStringSlice(q.Object, "status", "childQueues"); len(children) > 0 {
			return &DeletePendingError{Waiting: []string{fmt.Sprintf("queue %s: KAI still lists child queue(s) %s in status.childQueues",
				parent, strings.Join(children, ", "))}}
		}
		err = queues.Delete(ctx, parent, metav1.DeleteOptions{})
		switch {
		case err == nil || apierrors.IsNotFound(err):
		case refusedByAdmission(err):
			// KAI's status lagged behind its webhook's view; ask again later.
			return &DeletePendingError{Waiting: []string{fmt.Sprintf("queue %s: %v", parent, err)}}
		default:
			return fmt.Errorf("hostcluster: delete queue %s: %w", parent, err)
		}
	}
	return nil
}

// refusedByAdmission reports an API error that admission (KAI's webhook,
// or an admission policy) produced, as opposed to RBAC, which would need a
// human. The API server reports both as 403 Forbidden; only the message
// names the webhook or policy, so that is what is matched.
func refusedByAdmission(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return false
	}
	msg := status.Status().Message
	return strings.Contains(msg, "admission webhook") || strings.Contains(msg, "ValidatingAdmissionPolicy")
}

// Capacity sums the allocatable GPUs (nvidia.com/gpu), CPU and memory of
// all nodes, grouped by the pool label (Settings.PoolLabel); nodes without
// it are in DefaultPool.
func (c *Client) Capacity(ctx context.Context) (map[string]Quantities, error) {
	pools, err := c.pools(ctx)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Quantities, len(pools))
	for _, p := range pools {
		out[p.Name] = p.Capacity
	}
	return out, nil
}
