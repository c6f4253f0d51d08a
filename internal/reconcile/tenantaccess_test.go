package reconcile_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/devenv"
	"github.com/gpuplane/gpuplane/internal/envtestenv"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/reconcile"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/workqueue"
)

// hostVC is the desired host state of a virtual cluster as the worker
// loads it.
func (h *harness) hostVC(t testing.TB, id string) hostcluster.VirtualCluster {
	t.Helper()
	vc, err := reconcile.LoadHost(h.ctx, h.pool, id)
	if err != nil {
		t.Fatal(err)
	}
	return vc
}

// enqueue asks for a reconcile, as a resync does.
func (h *harness) enqueue(t testing.TB, id string) {
	t.Helper()
	if err := store.New(h.pool).InTx(h.ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		return workqueue.Enqueue(ctx, tx, id)
	}); err != nil {
		t.Fatal(err)
	}
}

// TestMemberChangeKeepsControlPlane proves item 5 of issue 9 through the
// whole path: members added and removed through the API reach the virtual
// cluster's RBAC, while the control plane's StatefulSet (its pod template,
// generation) and the Helm release stay exactly as they were, so the
// virtual control plane never restarts for a member change.
//
// A second real kube-apiserver stands in for the virtual API server: the
// simulated control plane publishes its admin kubeconfig in Secret
// vc-<name>, as vCluster does, and the worker applies the bindings through
// it.
func TestMemberChangeKeepsControlPlane(t *testing.T) {
	h := newHarness(t, harnessOptions{})
	sctx, cancel := context.WithTimeout(h.ctx, 2*time.Minute)
	defer cancel()
	virtualAPI, err := envtestenv.Start(sctx, envtestenv.Options{})
	if err != nil {
		t.Fatalf("second API server (the virtual one) needed: %v", err)
	}
	t.Cleanup(func() { _ = virtualAPI.Stop() })
	virtual := kubernetes.NewForConfigOrDie(virtualAPI.RESTConfig())

	// The worker as production builds it with OIDC for virtual API servers
	// (only the flags are rendered; the issuer is not contacted here).
	host, err := hostcluster.New(rest.CopyConfig(h.rc), hostcluster.Options{Settings: hostcluster.Settings{
		Chart: hostcluster.ChartSource{Dirs: h.charts},
		OIDC: hostcluster.OIDCSettings{IssuerURL: "https://login.example.com/realms/main", ClientID: "gpuplane",
			UsernameClaim: "email", UsernamePrefix: "oidc:", GroupsClaim: "groups", GroupsPrefix: "oidc:"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(host.Close)
	w := h.worker(host, workerConfig("rbac"))

	const id = "members"
	h.createVC(t, "team-a", id, vcSpec("1", 2000, 8*gi))
	h.runOnce(t, w)
	v := h.waitVC(t, id, 30*time.Second, "applied", applied)
	if c := condition(v, reconcile.CondTenantAccess); c == nil || c.GetStatus() != pb.Condition_FALSE || c.GetReason() != "Waiting" {
		t.Errorf("before the control plane is up: %s", describe(v))
	}

	// kubelet + vCluster: the control plane is up and publishes an admin
	// kubeconfig for the stand-in API server.
	ns := hostcluster.NamespaceName(id)
	sts, err := h.kube.AppsV1().StatefulSets(ns).Get(h.ctx, hostcluster.ReleaseName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := devenv.MarkControlPlaneReadyWith(h.ctx, h.kube, sts, virtualAPI.Kubeconfig()); err != nil {
		t.Fatal(err)
	}
	stop := h.start(t, w)
	defer stop()
	v = h.waitVC(t, id, 30*time.Second, "READY", readyAt)
	if !condTrue(v, reconcile.CondTenantAccess) {
		t.Fatalf("READY without the team's RBAC: %s", describe(v))
	}

	bindings := func() map[string][]string {
		t.Helper()
		list, err := virtual.RbacV1().ClusterRoleBindings().List(h.ctx, metav1.ListOptions{LabelSelector: hostcluster.LabelVirtualCluster + "=" + id})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, b := range list.Items {
			for _, s := range b.Subjects {
				out[b.Name+" -> "+b.RoleRef.Name] = append(out[b.Name+" -> "+b.RoleRef.Name], s.Kind+" "+s.Name)
			}
			slices.Sort(out[b.Name+" -> "+b.RoleRef.Name])
		}
		return out
	}
	waitBindings := func(what string, want map[string][]string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := bindings()
			if equality.Semantic.DeepEqual(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: bindings inside the virtual cluster\n got %v\nwant %v\n%s", what, got, want, describe(h.vc(t, id)))
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	// Seeded team-a: bob OWNER, carol MEMBER.
	waitBindings("seeded members", map[string][]string{
		"gpuplane:tenant-owners -> cluster-admin": {"User oidc:bob@example.com"},
		"gpuplane:tenant-members -> edit":         {"User oidc:carol@example.com"},
	})

	before, err := h.kube.AppsV1().StatefulSets(ns).Get(h.ctx, hostcluster.ReleaseName(id), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	releasesBefore := h.releases(t, id)
	unchanged := func(what string) {
		t.Helper()
		after, err := h.kube.AppsV1().StatefulSets(ns).Get(h.ctx, hostcluster.ReleaseName(id), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(before.Spec.Template, after.Spec.Template) || after.Generation != before.Generation {
			t.Errorf("%s changed the control plane's pod template (generation %d -> %d): the virtual control plane would restart",
				what, before.Generation, after.Generation)
		}
		if got := h.releases(t, id); !slices.Equal(got, releasesBefore) {
			t.Errorf("%s upgraded the release: %v -> %v", what, releasesBefore, got)
		}
	}

	// A new member, through the API as the team's owner.
	bob := h.env.As(t, "bob")
	if _, err := h.env.Members.CreateMember(bob, &pb.CreateMemberRequest{Parent: "teams/team-a", MemberId: "vera",
		Member: &pb.Member{Principal: &pb.Member_Group{Group: "team-a-viewers"}, Role: pb.TeamRole_VIEWER}}); err != nil {
		t.Fatal(err)
	}
	if _, err := h.env.Members.CreateMember(bob, &pb.CreateMemberRequest{Parent: "teams/team-a", MemberId: "dave",
		Member: &pb.Member{Principal: &pb.Member_User{User: "dave@example.com"}, Role: pb.TeamRole_MEMBER}}); err != nil {
		t.Fatal(err)
	}
	waitBindings("members added", map[string][]string{
		"gpuplane:tenant-owners -> cluster-admin": {"User oidc:bob@example.com"},
		"gpuplane:tenant-members -> edit":         {"User oidc:carol@example.com", "User oidc:dave@example.com"},
		"gpuplane:tenant-viewers -> view":         {"Group oidc:team-a-viewers"},
	})
	unchanged("adding members")

	// Removing the only viewer deletes the viewers binding.
	if _, err := h.env.Members.DeleteMember(bob, &pb.DeleteMemberRequest{Name: "teams/team-a/members/vera"}); err != nil {
		t.Fatal(err)
	}
	waitBindings("viewer removed", map[string][]string{
		"gpuplane:tenant-owners -> cluster-admin": {"User oidc:bob@example.com"},
		"gpuplane:tenant-members -> edit":         {"User oidc:carol@example.com", "User oidc:dave@example.com"},
	})
	unchanged("removing a member")
	h.waitIdle(t)
	if v := h.vc(t, id); !readyAt(v) || !condTrue(v, reconcile.CondTenantAccess) {
		t.Errorf("after member changes: %s", describe(v))
	}

	// Drift inside the virtual cluster (a tenant admin edits or deletes a
	// binding) is observed and repaired at the next reconcile.
	if err := virtual.RbacV1().ClusterRoleBindings().Delete(h.ctx, "gpuplane:tenant-owners", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	members, err := virtual.RbacV1().ClusterRoleBindings().Get(h.ctx, "gpuplane:tenant-members", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	members.Subjects = append(members.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "oidc:mallory@example.com"})
	if _, err := virtual.RbacV1().ClusterRoleBindings().Update(h.ctx, members, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	o, err := host.Observe(h.ctx, h.hostVC(t, id))
	if err != nil {
		t.Fatal(err)
	}
	if o.TenantAccess.InSync || !strings.Contains(o.TenantAccess.Detail, "gpuplane:tenant-owners missing") ||
		!strings.Contains(o.TenantAccess.Detail, "gpuplane:tenant-members subjects differ") || o.Ready() {
		t.Errorf("drift not observed: %+v", o.TenantAccess)
	}
	h.enqueue(t, id)
	waitBindings("drift repaired", map[string][]string{
		"gpuplane:tenant-owners -> cluster-admin": {"User oidc:bob@example.com"},
		"gpuplane:tenant-members -> edit":         {"User oidc:carol@example.com", "User oidc:dave@example.com"},
	})
	unchanged("repairing RBAC drift")
	if _, err := virtual.RbacV1().ClusterRoleBindings().Get(h.ctx, "gpuplane:tenant-viewers", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("viewers binding after its last member left: %v", err)
	}
}
