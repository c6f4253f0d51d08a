package hostcluster

import (
	"bytes"
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Team roles (Member.Role) and the built-in ClusterRole each is bound to
// inside the virtual cluster.
const (
	RoleOwner  = "OWNER"
	RoleMember = "MEMBER"
	RoleViewer = "VIEWER"

	MemberKindUser  = "user"
	MemberKindGroup = "group"
)

// tenantRoles lists, per team role, the ClusterRole it is bound to and the
// name of the ClusterRoleBinding inside the virtual cluster. One binding per
// role keeps names fixed (roleRef is immutable, so a binding never changes
// role) and independent of what characters principals contain. The names
// differ from the gpuplane:team-* bindings earlier versions deployed through
// the chart's values, which vCluster's deployer removes once they are gone
// from the values; it never touches these.
var tenantRoles = []struct {
	role, clusterRole, binding string
}{
	{RoleOwner, "cluster-admin", "gpuplane:tenant-owners"},
	{RoleMember, "edit", "gpuplane:tenant-members"},
	{RoleViewer, "view", "gpuplane:tenant-viewers"},
}

// OIDCCAConfigMapName is the ConfigMap in the host namespace holding the
// issuer CA the virtual API server trusts (Settings.OIDC.CACertPEM). It is
// part of the vCluster Helm release (experimental.deploy.host.manifests).
const OIDCCAConfigMapName = "gpuplane-oidc-ca"

// Where the CA ConfigMap is mounted in the vCluster control plane container;
// in chart 0.20 the virtual kube-apiserver runs as a process inside it.
const (
	oidcCAVolumeName = "gpuplane-oidc-ca"
	oidcCAMountPath  = "/etc/gpuplane/oidc"
	oidcCAKey        = "ca.crt"
	// OIDCCAFile is the --oidc-ca-file of virtual API servers.
	OIDCCAFile = oidcCAMountPath + "/" + oidcCAKey
)

// RenderTenantRBAC renders the ClusterRoleBindings that give a virtual
// cluster's members access inside it: OWNER -> cluster-admin, MEMBER ->
// edit, VIEWER -> view. Subjects are "User <UsernamePrefix><name>" or
// "Group <GroupsPrefix><name>", exactly what the virtual API server's OIDC
// authenticator makes of a token. The result is sorted by name, subjects are
// sorted and deduplicated, and a role without members gets no binding (the
// worker then deletes the one it applied before). Members with an unknown
// kind or role, or an empty name, are left out.
func RenderTenantRBAC(vc VirtualCluster, s Settings) []rbacv1.ClusterRoleBinding {
	o := s.OIDC
	subjects := map[string][]rbacv1.Subject{}
	for _, m := range vc.Members {
		name := strings.TrimSpace(m.Name)
		if name == "" {
			continue
		}
		var sub rbacv1.Subject
		switch m.Kind {
		case MemberKindUser:
			sub = rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: o.UsernamePrefix + name}
		case MemberKindGroup:
			sub = rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: o.GroupsPrefix + name}
		default:
			continue
		}
		subjects[m.Role] = append(subjects[m.Role], sub)
	}
	var out []rbacv1.ClusterRoleBinding
	for _, r := range tenantRoles {
		subs := subjects[r.role]
		if len(subs) == 0 {
			continue
		}
		slices.SortFunc(subs, func(a, b rbacv1.Subject) int {
			if c := strings.Compare(a.Kind, b.Kind); c != 0 {
				return c
			}
			return strings.Compare(a.Name, b.Name)
		})
		subs = slices.Compact(subs)
		out = append(out, rbacv1.ClusterRoleBinding{
			TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{
				Name: r.binding,
				Labels: map[string]string{
					LabelManagedBy:      ManagedByValue,
					LabelVirtualCluster: vc.Name,
					LabelTeam:           vc.Team,
				},
			},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: r.clusterRole},
			Subjects: subs,
		})
	}
	slices.SortFunc(out, func(a, b rbacv1.ClusterRoleBinding) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// renderOIDCCAConfigMap is the host-side ConfigMap carrying the issuer CA.
func renderOIDCCAConfigMap(vc VirtualCluster, caPEM []byte) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      OIDCCAConfigMapName,
			Namespace: NamespaceName(vc.Name),
			Labels:    commonLabels(vc),
		},
		Data: map[string]string{oidcCAKey: string(caPEM)},
	}
}

// manifestsYAML joins objects as YAML documents. Map keys come out sorted,
// so equal objects always give equal text (and an equal values hash).
func manifestsYAML(objs ...any) (string, error) {
	var b bytes.Buffer
	for i, obj := range objs {
		data, err := yaml.Marshal(obj)
		if err != nil {
			return "", fmt.Errorf("hostcluster: render manifest: %w", err)
		}
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(data)
	}
	return b.String(), nil
}
