package hostcluster

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	rbacac "k8s.io/client-go/applyconfigurations/rbac/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// The team's RBAC inside a virtual cluster (RenderTenantRBAC) is applied by
// the worker through the virtual cluster's admin kubeconfig (Secret
// vc-<name>, written by vCluster), not through the chart's values: the chart
// hashes every value into the control plane's pod template, so a member
// change carried in the values would restart the virtual control plane.
// Applied with server-side apply and one field manager, so a resync reverts
// edits made inside the virtual cluster; bindings of roles that lost their
// last member are deleted.
//
// It only happens with Settings.OIDC: without it members cannot
// authenticate to the virtual API server, which then knows only the admin
// client certificate.

// virtualAPITimeout bounds each request to a virtual API server.
const virtualAPITimeout = 15 * time.Second

// TenantAccessState is what Observe found of the team's RBAC inside the
// virtual cluster.
type TenantAccessState struct {
	// Applicable: Settings.OIDC is on, so the team's bindings belong there.
	Applicable bool
	// InSync: every binding exists with exactly the desired subjects and no
	// stale one remains.
	InSync bool
	// Detail says what is missing or different, or why nothing was read.
	Detail string
}

// tenantAccessApplicable reports whether the team's RBAC is applied at all.
func (c *Client) tenantAccessApplicable() bool { return c.settings.OIDC.Enabled() }

// virtualConn is a client of one virtual API server and the version (UID
// and resourceVersion) of the admin kubeconfig Secret it was built from.
type virtualConn struct {
	version string
	client  kubernetes.Interface
}

// virtualClient connects to the virtual API server with the admin
// kubeconfig vCluster wrote. ok is false (and err nil) while the control
// plane is not ready or has not written the Secret yet. The client is kept
// while the Secret stays the same, so a resync reuses its connection
// instead of reading the Secret and opening a TLS session each time.
func (c *Client) virtualClient(ctx context.Context, vc VirtualCluster) (kubernetes.Interface, bool, error) {
	ns := NamespaceName(vc.Name)
	sts, ok, err := c.cachedStatefulSet(ctx, vc.Name)
	if err != nil || !ok || !statefulSetReady(sts) {
		return nil, false, err
	}
	meta, err := c.kubeconfigSecret(ctx, vc.Name)
	if err != nil || meta == nil {
		return nil, false, err
	}
	version := objectVersion(meta.UID, meta.ResourceVersion)
	c.virtualMu.Lock()
	conn, known := c.virtual[vc.Name]
	c.virtualMu.Unlock()
	if known && conn.version == version {
		return conn.client, true, nil
	}
	sec, err := c.kube.CoreV1().Secrets(ns).Get(ctx, KubeconfigSecretName(vc.Name), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	raw := sec.Data[KubeconfigSecretConfigKey]
	if len(raw) == 0 {
		return nil, false, fmt.Errorf("admin kubeconfig Secret %s/%s has no %q key", ns, sec.Name, KubeconfigSecretConfigKey)
	}
	rc, err := clientcmd.RESTConfigFromKubeConfig(raw)
	if err != nil {
		return nil, false, fmt.Errorf("admin kubeconfig Secret %s/%s: %w", ns, sec.Name, err)
	}
	rc.Timeout = virtualAPITimeout
	rc.UserAgent = "gpuplane"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, false, err
	}
	c.virtualMu.Lock()
	c.virtual[vc.Name] = virtualConn{version: objectVersion(sec.UID, sec.ResourceVersion), client: cs}
	c.virtualMu.Unlock()
	return cs, true, nil
}

// tenantSelector matches the bindings gpuplane applied in a virtual cluster.
func tenantSelector(vc VirtualCluster) string {
	return labels.SelectorFromSet(labels.Set{LabelManagedBy: ManagedByValue, LabelVirtualCluster: vc.Name}).String()
}

// applyTenantAccess converges the team's bindings inside the virtual
// cluster; it waits (returns a detail, no error) while the control plane is
// not up.
func (c *Client) applyTenantAccess(ctx context.Context, vc VirtualCluster) (string, error) {
	if !c.tenantAccessApplicable() {
		return "skipped: no OIDC for virtual API servers, so no member can sign in to them", nil
	}
	virtual, ok, err := c.virtualClient(ctx, vc)
	if err != nil || !ok {
		return "waiting for the control plane and its admin kubeconfig", err
	}
	want := RenderTenantRBAC(vc, c.settings)
	crbs := virtual.RbacV1().ClusterRoleBindings()
	apply := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	var applied []string
	for _, b := range want {
		subjects := make([]*rbacac.SubjectApplyConfiguration, len(b.Subjects))
		for i, s := range b.Subjects {
			subjects[i] = rbacac.Subject().WithKind(s.Kind).WithAPIGroup(s.APIGroup).WithName(s.Name)
		}
		ac := rbacac.ClusterRoleBinding(b.Name).WithLabels(b.Labels).
			WithRoleRef(rbacac.RoleRef().WithAPIGroup(b.RoleRef.APIGroup).WithKind(b.RoleRef.Kind).WithName(b.RoleRef.Name)).
			WithSubjects(subjects...)
		if _, err := crbs.Apply(ctx, ac, apply); err != nil {
			return strings.Join(applied, ", "), fmt.Errorf("virtual cluster %s: apply ClusterRoleBinding %s: %w", vc.Name, b.Name, err)
		}
		applied = append(applied, fmt.Sprintf("%s (%d)", b.Name, len(b.Subjects)))
	}
	live, err := crbs.List(ctx, metav1.ListOptions{LabelSelector: tenantSelector(vc)})
	if err != nil {
		return strings.Join(applied, ", "), fmt.Errorf("virtual cluster %s: list ClusterRoleBindings: %w", vc.Name, err)
	}
	var deleted []string
	for _, l := range live.Items {
		if slices.ContainsFunc(want, func(b rbacv1.ClusterRoleBinding) bool { return b.Name == l.Name }) {
			continue
		}
		err := crbs.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &l.UID}})
		if err != nil && !apierrors.IsNotFound(err) {
			return strings.Join(applied, ", "), fmt.Errorf("virtual cluster %s: delete stale ClusterRoleBinding %s: %w", vc.Name, l.Name, err)
		}
		deleted = append(deleted, l.Name)
	}
	detail := "bindings " + strings.Join(applied, ", ")
	if len(applied) == 0 {
		detail = "no members to bind"
	}
	if len(deleted) > 0 {
		detail += "; deleted " + strings.Join(deleted, ", ")
	}
	return detail, nil
}

// observeTenantAccess compares the bindings inside the virtual cluster
// with the desired ones.
func (c *Client) observeTenantAccess(ctx context.Context, vc VirtualCluster) (TenantAccessState, error) {
	if !c.tenantAccessApplicable() {
		return TenantAccessState{}, nil
	}
	st := TenantAccessState{Applicable: true}
	virtual, ok, err := c.virtualClient(ctx, vc)
	if err != nil {
		return st, err
	}
	if !ok {
		st.Detail = "waiting for the control plane"
		return st, nil
	}
	live, err := virtual.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{LabelSelector: tenantSelector(vc)})
	if err != nil {
		// Reported, not returned: an unreachable virtual API server is a
		// state of the virtual cluster, and the rest of Observe still counts.
		st.Detail = fmt.Sprintf("cannot read the virtual cluster's RBAC: %v", err)
		return st, nil
	}
	have := map[string]rbacv1.ClusterRoleBinding{}
	for _, b := range live.Items {
		have[b.Name] = b
	}
	var drift []string
	for _, w := range RenderTenantRBAC(vc, c.settings) {
		h, ok := have[w.Name]
		delete(have, w.Name)
		switch {
		case !ok:
			drift = append(drift, w.Name+" missing")
		case h.RoleRef != w.RoleRef:
			drift = append(drift, fmt.Sprintf("%s bound to %s, want %s", w.Name, h.RoleRef.Name, w.RoleRef.Name))
		case !equality.Semantic.DeepEqual(sortedSubjects(h.Subjects), w.Subjects):
			drift = append(drift, w.Name+" subjects differ")
		}
	}
	for name := range have {
		drift = append(drift, name+" is stale")
	}
	slices.Sort(drift)
	st.InSync = len(drift) == 0
	st.Detail = strings.Join(drift, ", ")
	return st, nil
}

func sortedSubjects(s []rbacv1.Subject) []rbacv1.Subject {
	out := slices.Clone(s)
	slices.SortFunc(out, func(a, b rbacv1.Subject) int {
		if c := strings.Compare(a.Kind, b.Kind); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}
