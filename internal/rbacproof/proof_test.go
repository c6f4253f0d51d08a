package rbacproof

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/gpuplane/gpuplane/internal/devenv"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/names"
)

const gib = int64(1) << 30

func virtualCluster(name, tier string) hostcluster.VirtualCluster {
	pool := ""
	if tier == hostcluster.TierDedicated {
		pool = names.DedicatedPool("team-" + name)
	}
	return hostcluster.VirtualCluster{
		Name: name, Team: "team-" + name, Department: "dept-" + name, Tier: tier, Pool: pool,
		AllowFractionalGPUs: tier == hostcluster.TierShared,
		Leaf: hostcluster.QueueSpec{
			Quota:           hostcluster.Quantities{GPUCenti: 200, CPUMillis: 16000, MemoryBytes: 64 * gib},
			Limit:           &hostcluster.Quantities{GPUCenti: 400, CPUMillis: 32000, MemoryBytes: 128 * gib},
			OverQuotaWeight: 1,
		},
		TeamQueue:         hostcluster.QueueSpec{Quota: hostcluster.Quantities{GPUCenti: 800, CPUMillis: 64000, MemoryBytes: 256 * gib}, OverQuotaWeight: 1, Priority: 100},
		DepartmentQueue:   hostcluster.QueueSpec{Quota: hostcluster.Quantities{GPUCenti: 1600, CPUMillis: 128000, MemoryBytes: 512 * gib}, OverQuotaWeight: 1, Priority: 100},
		KubernetesVersion: "v1.36.0",
		ChartVersion:      defaultChart,
		Generation:        1,
		Members: []hostcluster.Member{
			{Kind: hostcluster.MemberKindUser, Name: "owner@example.com", Role: hostcluster.RoleOwner},
			{Kind: hostcluster.MemberKindGroup, Name: "readers", Role: hostcluster.RoleViewer},
		},
	}
}

// The chart versions gpuplane offers by default (app.Defaults): new virtual
// clusters get the first; the second is kept by older ones.
const (
	defaultChart = "0.36.1"
	oldChart     = "0.20.0"
)

// hostClient is the host cluster client as gpuplane builds it in production
// (internal/app newHostClient): OIDC for the virtual API servers, with a
// private CA, so the release also carries the CA ConfigMap.
func hostClient(t *testing.T, cfg *rest.Config) *hostcluster.Client {
	t.Helper()
	oidc := hostcluster.OIDCSettings{
		IssuerURL: "https://login.example.com/realms/main", ClientID: "gpuplane",
		UsernameClaim: "email", UsernamePrefix: "oidc:", GroupsClaim: "groups", GroupsPrefix: "oidc:",
		CACertPEM: shared.caPEM,
	}
	if err := oidc.Validate(); err != nil {
		t.Fatal(err)
	}
	c, err := hostcluster.New(cfg, hostcluster.Options{Settings: hostcluster.Settings{
		Chart:             hostcluster.ChartSource{Dirs: shared.charts},
		IngressNamespaces: []string{"gpuplane-system"},
		OIDC:              oidc,
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// workerLifecycle is everything the worker does to one virtual cluster over
// its life (internal/reconcile): apply + observe on create, then (the
// kubelet and vCluster's part, played by the admin) the control plane comes
// up, a quota change, a resync with nothing to change, the capacity read,
// and delete. It stops at the first error. strict also checks the outcome
// of each step, for the run with the chart's full role.
func workerLifecycle(ctx context.Context, host *hostcluster.Client, vc hostcluster.VirtualCluster, strict bool) error {
	apply := func(stage, wantRelease string) error {
		steps, err := host.Apply(ctx, vc)
		if err != nil {
			return fmt.Errorf("%s: apply: %w", stage, err)
		}
		if strict {
			if r, _ := steps.Of(hostcluster.StepRelease); !strings.Contains(r.Detail, wantRelease) {
				return fmt.Errorf("%s: release step %+v, want %q", stage, r, wantRelease)
			}
		}
		if _, err := host.Observe(ctx, vc); err != nil {
			return fmt.Errorf("%s: observe: %w", stage, err)
		}
		return nil
	}

	// The virtual cluster was guarded by admission objects of its own
	// under an earlier version: the first apply moves it to the shared
	// guardrails and deletes them.
	if err := createLegacyGuardrails(ctx, vc); err != nil {
		return err
	}
	if err := apply("create", "installed"); err != nil {
		return err
	}
	sts, err := shared.kube.AppsV1().StatefulSets(hostcluster.NamespaceName(vc.Name)).Get(ctx, hostcluster.ReleaseName(vc.Name), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("create: the release has no StatefulSet: %w", err)
	}
	if err := devenv.MarkControlPlaneReadyWith(ctx, shared.kube, sts, shared.virtual.Kubeconfig()); err != nil {
		return err
	}
	// The control plane is up: the next reconcile applies the team's RBAC
	// inside the virtual cluster.
	if err := apply("control plane up", "unchanged"); err != nil {
		return err
	}
	o, err := host.Observe(ctx, vc)
	if err != nil {
		return fmt.Errorf("create: observe once ready: %w", err)
	}
	if strict && !o.Ready() {
		return fmt.Errorf("create: not ready after the control plane came up: %+v", o)
	}
	if strict {
		// Production settings: the release carries the OIDC CA ConfigMap.
		if _, err := shared.kube.CoreV1().ConfigMaps(sts.Namespace).Get(ctx, hostcluster.OIDCCAConfigMapName, metav1.GetOptions{}); err != nil {
			return fmt.Errorf("create: OIDC CA ConfigMap: %w", err)
		}
	}

	vc.Generation++
	vc.Leaf.Quota.GPUCenti, vc.Leaf.Limit.GPUCenti = 300, 600
	if err := apply("quota change", "upgraded"); err != nil {
		return err
	}
	if err := apply("resync", "unchanged"); err != nil {
		return err
	}

	pools, err := host.Capacity(ctx)
	if err != nil {
		return fmt.Errorf("capacity: %w", err)
	}
	if strict && pools[names.DedicatedPool("team-b")].GPUCenti == 0 {
		return fmt.Errorf("capacity: no GPUs in the demo's dedicated pool in %+v", pools)
	}

	if err := host.Delete(ctx, vc); err != nil {
		return fmt.Errorf("delete: %w", err)
	}
	return nil
}

// createLegacyGuardrails writes, as the admin, the per-virtual-cluster
// admission objects (hostcluster.PolicyName) an earlier version of the
// worker created for vc, which the worker deletes once the shared
// guardrails are in force in its namespace.
func createLegacyGuardrails(ctx context.Context, vc hostcluster.VirtualCluster) error {
	name := hostcluster.PolicyName(vc.Name)
	labels := map[string]string{hostcluster.LabelManagedBy: hostcluster.ManagedByValue, hostcluster.LabelVirtualCluster: vc.Name}
	meta := metav1.ObjectMeta{Name: name, Labels: labels}
	pods := []admissionv1.NamedRuleWithOperations{{RuleWithOperations: admissionv1.RuleWithOperations{
		Operations: []admissionv1.OperationType{admissionv1.Create},
		Rule:       admissionv1.Rule{APIGroups: []string{""}, APIVersions: []string{"v1"}, Resources: []string{"pods"}}}}}
	inNamespace := &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": hostcluster.NamespaceName(vc.Name)}}
	fail := admissionv1.Fail
	adm := shared.kube.AdmissionregistrationV1()
	created := func(err error) error {
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
	if err := created(func() error {
		_, err := adm.ValidatingAdmissionPolicies().Create(ctx, &admissionv1.ValidatingAdmissionPolicy{ObjectMeta: meta,
			Spec: admissionv1.ValidatingAdmissionPolicySpec{FailurePolicy: &fail, MatchConstraints: &admissionv1.MatchResources{ResourceRules: pods},
				Validations: []admissionv1.Validation{{Expression: "true"}}}}, metav1.CreateOptions{})
		return err
	}()); err != nil {
		return err
	}
	if err := created(func() error {
		_, err := adm.ValidatingAdmissionPolicyBindings().Create(ctx, &admissionv1.ValidatingAdmissionPolicyBinding{ObjectMeta: meta,
			Spec: admissionv1.ValidatingAdmissionPolicyBindingSpec{PolicyName: name, ValidationActions: []admissionv1.ValidationAction{admissionv1.Deny},
				MatchResources: &admissionv1.MatchResources{NamespaceSelector: inNamespace}}}, metav1.CreateOptions{})
		return err
	}()); err != nil {
		return err
	}
	if err := created(func() error {
		_, err := adm.MutatingAdmissionPolicies().Create(ctx, &admissionv1.MutatingAdmissionPolicy{ObjectMeta: meta,
			Spec: admissionv1.MutatingAdmissionPolicySpec{FailurePolicy: &fail, ReinvocationPolicy: admissionv1.NeverReinvocationPolicy,
				MatchConstraints: &admissionv1.MatchResources{ResourceRules: pods},
				Mutations: []admissionv1.Mutation{{PatchType: admissionv1.PatchTypeApplyConfiguration,
					ApplyConfiguration: &admissionv1.ApplyConfiguration{Expression: "Object{}"}}}}}, metav1.CreateOptions{})
		return err
	}()); err != nil {
		return err
	}
	return created(func() error {
		_, err := adm.MutatingAdmissionPolicyBindings().Create(ctx, &admissionv1.MutatingAdmissionPolicyBinding{ObjectMeta: meta,
			Spec: admissionv1.MutatingAdmissionPolicyBindingSpec{PolicyName: name,
				MatchResources: &admissionv1.MatchResources{NamespaceSelector: inNamespace}}}, metav1.CreateOptions{})
		return err
	}())
}

// deleteSharedGuardrails removes, as the admin, the shared guardrails, so
// that the next apply creates them as on a host cluster's first virtual
// cluster.
func deleteSharedGuardrails(ctx context.Context) error {
	adm := shared.kube.AdmissionregistrationV1()
	name := hostcluster.GuardrailsPolicyName
	for _, del := range []func() error{
		func() error { return adm.ValidatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}) },
		func() error { return adm.ValidatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}) },
		func() error { return adm.MutatingAdmissionPolicyBindings().Delete(ctx, name, metav1.DeleteOptions{}) },
		func() error { return adm.MutatingAdmissionPolicies().Delete(ctx, name, metav1.DeleteOptions{}) },
	} {
		if err := del(); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	return nil
}

// serverLifecycle is what the API server does on the host cluster: read
// node capacity, and for GetVirtualClusterKubeconfig the virtual cluster's
// CA and (break glass) admin kubeconfig, which vCluster publishes in a
// Secret. The Secret is written by the admin (vCluster's part, see
// publishKubeconfig) beforehand.
func serverLifecycle(ctx context.Context, host *hostcluster.Client, vcName string) error {
	pools, err := host.Capacity(ctx)
	if err != nil {
		return fmt.Errorf("capacity: %w", err)
	}
	if len(pools) == 0 {
		return errors.New("capacity: no pools")
	}
	ca, err := host.VirtualClusterCA(ctx, vcName)
	if err != nil {
		return fmt.Errorf("kubeconfig CA: %w", err)
	}
	if len(ca) == 0 {
		return errors.New("kubeconfig CA: empty")
	}
	if _, err := host.AdminKubeconfig(ctx, vcName); err != nil {
		return fmt.Errorf("break-glass kubeconfig: %w", err)
	}
	return nil
}

// publishKubeconfig writes what vCluster writes once its control plane is up:
// Secret vc-<name> in namespace vc-<name> with the admin kubeconfig and CA.
func publishKubeconfig(t *testing.T, ctx context.Context, vcName string) {
	t.Helper()
	ns := hostcluster.NamespaceName(vcName)
	if _, err := shared.kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	kubeconfig := fmt.Sprintf("apiVersion: v1\nkind: Config\nclusters:\n- name: %[1]s\n  cluster:\n    server: https://%[1]s.%[2]s.svc\n", vcName, ns)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: hostcluster.KubeconfigSecretName(vcName), Namespace: ns},
		Data: map[string][]byte{
			hostcluster.KubeconfigSecretConfigKey: []byte(kubeconfig),
			hostcluster.KubeconfigSecretCAKey:     shared.caPEM,
		},
	}
	if _, err := shared.kube.CoreV1().Secrets(ns).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// assertGone checks, as admin, that Delete left nothing cluster-scoped
// behind and that the namespace is on its way out.
func assertGone(t *testing.T, ctx context.Context, vc hostcluster.VirtualCluster) {
	t.Helper()
	kube := shared.kube
	notFound := func(what string, err error) {
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s after delete: %v (want NotFound)", what, err)
		}
	}
	adm := kube.AdmissionregistrationV1()
	p := hostcluster.PolicyName(vc.Name)
	_, err := adm.ValidatingAdmissionPolicies().Get(ctx, p, metav1.GetOptions{})
	notFound("validating policy", err)
	_, err = adm.ValidatingAdmissionPolicyBindings().Get(ctx, p, metav1.GetOptions{})
	notFound("validating policy binding", err)
	_, err = adm.MutatingAdmissionPolicies().Get(ctx, p, metav1.GetOptions{})
	notFound("mutating policy", err)
	_, err = adm.MutatingAdmissionPolicyBindings().Get(ctx, p, metav1.GetOptions{})
	notFound("mutating policy binding", err)
	ns := hostcluster.NamespaceName(vc.Name)
	crs, err := kube.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{LabelSelector: "release=" + hostcluster.ReleaseName(vc.Name)})
	if err != nil {
		t.Fatal(err)
	}
	if len(crs.Items) > 0 {
		t.Errorf("vCluster ClusterRole %s left behind", crs.Items[0].Name)
	}
	n, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
	if err == nil && n.DeletionTimestamp == nil {
		t.Errorf("namespace %s not deleted", ns)
	}
}

// TestChartRolesSuffice: bound to nothing but what the chart grants it, each
// component does its whole job without one RBAC denial.
func TestChartRolesSuffice(t *testing.T) {
	env(t)
	grants := chartGrants(t)
	for _, component := range []string{"worker", "server"} {
		if _, ok := grants[component]; !ok {
			t.Fatalf("the chart renders no %s Deployment", component)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	t.Run("worker", func(t *testing.T) {
		g := grants["worker"]
		spec := grantSpec{}
		for _, cr := range g.ClusterRoles {
			spec.ClusterRules = append(spec.ClusterRules, cr.Rules) // verbatim
		}
		for _, r := range g.Roles {
			spec.Rules = append(spec.Rules, r.Rules)
		}
		id := newIdentity(t, ctx, g.Namespace, g.ServiceAccount, spec)
		host := hostClient(t, id.config)
		// The host cluster's first virtual cluster: the worker creates the
		// shared guardrails.
		if err := deleteSharedGuardrails(ctx); err != nil {
			t.Fatal(err)
		}
		// Both tiers on the default chart, and a virtual cluster that kept
		// chart 0.20.
		old := virtualCluster("full-old", hostcluster.TierDedicated)
		old.ChartVersion, old.KubernetesVersion = oldChart, "v1.30.2"
		for _, vc := range []hostcluster.VirtualCluster{
			virtualCluster("full-shared", hostcluster.TierShared), virtualCluster("full-dedicated", hostcluster.TierDedicated), old,
		} {
			start := time.Now()
			if err := workerLifecycle(ctx, host, vc, true); err != nil {
				_, msgs := id.denied.RBAC()
				t.Fatalf("%s virtual cluster on chart %s: %v\n403 answers:\n%s", vc.Tier, vc.ChartVersion, err, strings.Join(msgs, "\n"))
			}
			t.Logf("%s virtual cluster on chart %s: create, quota change, resync, capacity, delete as %s in %s",
				vc.Tier, vc.ChartVersion, id.user, time.Since(start).Round(time.Millisecond))
			assertGone(t, ctx, vc)
		}
		if perms, msgs := id.denied.RBAC(); len(perms) > 0 {
			t.Errorf("RBAC denied %v:\n%s", perms, strings.Join(msgs, "\n"))
		}
	})

	t.Run("server", func(t *testing.T) {
		g := grants["server"]
		spec := grantSpec{}
		for _, cr := range g.ClusterRoles {
			spec.ClusterRules = append(spec.ClusterRules, cr.Rules)
		}
		for _, r := range g.Roles {
			spec.Rules = append(spec.Rules, r.Rules)
		}
		id := newIdentity(t, ctx, g.Namespace, g.ServiceAccount, spec)
		publishKubeconfig(t, ctx, "served")
		if err := serverLifecycle(ctx, hostClient(t, id.config), "served"); err != nil {
			t.Fatal(err)
		}
		if perms, msgs := id.denied.RBAC(); len(perms) > 0 {
			t.Errorf("RBAC denied %v:\n%s", perms, strings.Join(msgs, "\n"))
		}
	})

	t.Run("no grant is refused", func(t *testing.T) {
		// The control: the authorizer really is RBAC, and an unbound
		// ServiceAccount cannot do the job.
		id := newIdentity(t, ctx, "rbacproof-control", "nobody", grantSpec{})
		publishKubeconfig(t, ctx, "served")
		err := serverLifecycle(ctx, hostClient(t, id.config), "served")
		if !apierrors.IsForbidden(err) {
			t.Fatalf("capacity without a grant: %v, want Forbidden", err)
		}
		if perms, _ := id.denied.RBAC(); !slices.Contains(perms, perm{"", "nodes", "list"}) {
			t.Fatalf("denials %v, want list core/nodes", perms)
		}
	})
}

// TestEveryPermissionIsNeeded takes the chart's rules apart into single
// (API group, resource, verb) permissions and, for each, binds a fresh
// ServiceAccount to all the others: the component's job must then fail, and
// the API server's denial must name exactly the permission left out (the
// authorizer's "cannot <verb> resource", or RBAC's escalation check when
// Helm creates the vCluster chart's Role or ClusterRole, which may only
// grant what the worker itself holds). Permissions, not rule entries, are
// the unit: a rule entry with a resource or verb too many would pass a
// rule-level test.
//
// The worker runs the DEDICATED lifecycle here: it does everything the
// SHARED one does (same steps, one more guardrail probe) and also installs
// the vCluster ClusterRole that syncs the dedicated pool's nodes. It runs
// it on the default chart and, when that succeeds, on chart 0.20, which
// existing virtual clusters may still run.
func TestEveryPermissionIsNeeded(t *testing.T) {
	env(t)
	grants := chartGrants(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	type component struct {
		name string
		run  func(ctx context.Context, host *hostcluster.Client, i int) error
	}
	components := []component{
		{"worker", func(ctx context.Context, host *hostcluster.Client, i int) error {
			// A permission is needed when the default chart's lifecycle
			// fails without it, or else the lifecycle of a virtual cluster
			// that kept chart 0.20 (its ClusterRole lists node subresources
			// that 0.36's only gets).
			if err := workerLifecycle(ctx, host, virtualCluster(fmt.Sprintf("minus-%d", i), hostcluster.TierDedicated), false); err != nil {
				return err
			}
			old := virtualCluster(fmt.Sprintf("minus-old-%d", i), hostcluster.TierDedicated)
			old.ChartVersion, old.KubernetesVersion = oldChart, "v1.30.2"
			return workerLifecycle(ctx, host, old, false)
		}},
		{"server", func(ctx context.Context, host *hostcluster.Client, _ int) error {
			return serverLifecycle(ctx, host, "served")
		}},
	}
	publishKubeconfig(t, ctx, "served")
	n := 0
	for _, c := range components {
		g := grants[c.name]
		if len(g.Roles) > 0 {
			t.Fatalf("%s: the chart binds namespaced Roles; extend the proof to take them apart too", c.name)
		}
		perms := expand(t, g.Rules())
		t.Logf("%s: %d permissions in ClusterRole(s) %s", c.name, len(perms), roleNames(g))
		prove := func(t *testing.T, missing perm, i int) {
			others := slices.DeleteFunc(slices.Clone(perms), func(p perm) bool { return p == missing })
			id := newIdentity(t, ctx, "rbacproof-minus", fmt.Sprintf("%s-%d", c.name, i), grantSpec{ClusterRules: [][]rbacv1.PolicyRule{rulesOf(others)}}, missing)
			sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			err := c.run(sctx, hostClient(t, id.config), i)
			denied, msgs := id.denied.RBAC()
			if err == nil {
				t.Fatalf("%s did its whole job without %s: the chart grants more than it needs", c.name, missing)
			}
			if !slices.Contains(denied, missing) {
				t.Fatalf("failed (%v), but no RBAC denial named %s; 403 answers:\n%s", err, missing, strings.Join(msgs, "\n"))
			}
			if len(denied) > 1 {
				t.Errorf("denials %v name more than %s: the chart's role is missing something", denied, missing)
			}
			t.Logf("refused: %s", firstLine(err.Error()))
		}
		// Creating the shared guardrails is needed once per host cluster,
		// for its first virtual cluster: those permissions are proven one
		// at a time afterwards, each on a host cluster without them.
		var firstOnHost []perm
		t.Run(c.name, func(t *testing.T) {
			for _, missing := range perms {
				n++
				i := n
				if missing.Verb == "create" && missing.Group == "admissionregistration.k8s.io" {
					firstOnHost = append(firstOnHost, missing)
					continue
				}
				t.Run(missing.String(), func(t *testing.T) {
					t.Parallel()
					prove(t, missing, i)
				})
			}
		})
		t.Run(c.name+" on a host cluster without the shared guardrails", func(t *testing.T) {
			for _, missing := range firstOnHost {
				n++
				t.Run(missing.String(), func(t *testing.T) {
					if err := deleteSharedGuardrails(ctx); err != nil {
						t.Fatal(err)
					}
					prove(t, missing, n)
				})
			}
		})
	}
}

func roleNames(g chartGrant) string {
	var names []string
	for _, r := range g.ClusterRoles {
		names = append(names, r.Name)
	}
	return strings.Join(names, ", ")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}
