package hostcluster

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/internal/devenv/oidcdev"
	"github.com/gpuplane/gpuplane/internal/envtestenv"
)

// Users of the test issuer. bob, carol, dan and erin are as in the demo
// seed (bob owns team-a, carol is a member of it, dan and erin are team-b);
// vera sees team-a through the group team-a-viewers; mallory's identity
// provider claims system:masters for her.
var oidcTestUsers = []oidcdev.User{
	{Username: "bob", Groups: []string{"team-a-owners"}},
	{Username: "carol", Groups: []string{"ml-engineers"}},
	{Username: "dan", Groups: []string{"team-b-owners"}},
	{Username: "erin", Groups: []string{"ml-engineers"}},
	{Username: "vera", Groups: []string{"team-a-viewers"}},
	{Username: "mallory", Groups: []string{"system:masters"}},
}

func email(user string) string { return user + "@example.com" }

// TestOIDCTenantAccessOnRealAPIServer proves the rendered OIDC flags and
// RBAC on a real kube-apiserver: the extraArgs RenderVClusterValues
// produces are given to an envtest API server exactly as vCluster would give
// them to the virtual one, the bindings the worker applies
// (RenderTenantRBAC) are created in it, and ID tokens from a real OIDC
// issuer are judged by the real authenticator and RBAC authorizer.
func TestOIDCTenantAccessOnRealAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	issuer, err := oidcdev.New(ctx, oidcdev.Config{TLS: true, Users: oidcTestUsers, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = issuer.Close() })

	settings := Settings{OIDC: OIDCSettings{
		IssuerURL:      issuer.IssuerURL(),
		ClientID:       "gpuplane",
		UsernameClaim:  "email",
		UsernamePrefix: "oidc:",
		GroupsClaim:    "groups",
		GroupsPrefix:   "oidc:",
		CACertPEM:      issuer.CACertPEM(),
	}}
	if err := settings.OIDC.Validate(); err != nil {
		t.Fatal(err)
	}
	vc := testVC("oidc-proof", "team-a", "research", TierShared)
	vc.Members = []Member{
		{Kind: MemberKindUser, Name: email("bob"), Role: RoleOwner},
		{Kind: MemberKindUser, Name: email("carol"), Role: RoleMember},
		{Kind: MemberKindGroup, Name: "team-a-viewers", Role: RoleViewer},
	}
	values := RenderVClusterValues(vc, settings)

	// The flags exactly as rendered; only the CA path differs, because the
	// ConfigMap mount exists in the vCluster pod, not on this machine.
	caFile := filepath.Join(t.TempDir(), "oidc-ca.crt")
	if err := os.WriteFile(caFile, issuer.CACertPEM(), 0o600); err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, a := range extraArgs(t, values) {
		if a == "--oidc-ca-file="+OIDCCAFile {
			a = "--oidc-ca-file=" + caFile
		}
		args = append(args, a)
	}
	if !slices.Contains(args, "--oidc-ca-file="+caFile) {
		t.Fatalf("rendered extraArgs lack --oidc-ca-file=%s: %v", OIDCCAFile, args)
	}
	t.Logf("virtual API server flags: %q", args)
	// No --authorization-mode: envtest already runs RBAC alone (as vCluster's
	// k8s distro does), and envtestenv appends to envtest's defaults, so
	// passing it gives "RBAC,RBAC", which kube-apiserver refuses. The 403s
	// below show RBAC is what decides.

	envtestenv.SkipIfShort(t)
	env, err := envtestenv.Start(ctx, envtestenv.Options{ExtraAPIServerArgs: args, Logf: t.Logf})
	if err != nil {
		t.Fatalf("real API server needed: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	adminCfg := env.RESTConfig()
	admin := kubernetes.NewForConfigOrDie(adminCfg)

	aggregateClusterRoles(t, ctx, admin)

	// What the worker applies inside the virtual cluster (tenantaccess.go).
	for _, b := range RenderTenantRBAC(vc, settings) {
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &b, metav1.CreateOptions{}); err != nil {
			t.Fatalf("apply rendered %s: %v", b.Name, err)
		}
	}
	const ns = "work"
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	tokenFor := func(user string, opts oidcdev.TokenOptions) string {
		t.Helper()
		tok, err := issuer.TokenWith(ctx, user, opts)
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	// A client that knows nothing but the server's CA and a bearer token.
	clientWith := func(token string) kubernetes.Interface {
		cfg := &rest.Config{
			Host:            adminCfg.Host,
			TLSClientConfig: rest.TLSClientConfig{CAData: adminCfg.CAData},
			BearerToken:     token,
		}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	as := func(user string) kubernetes.Interface { return clientWith(tokenFor(user, oidcdev.TokenOptions{})) }

	// kube-apiserver fetches the issuer's discovery document and keys in
	// the background; until then every token is rejected.
	carol := as("carol")
	var review *authnv1.SelfSubjectReview
	deadline := time.Now().Add(60 * time.Second)
	for {
		review, err = carol.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authnv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("carol's token never authenticated: %v", err)
	}
	who := review.Status.UserInfo
	if who.Username != "oidc:carol@example.com" || !slices.Contains(who.Groups, "oidc:ml-engineers") || !slices.Contains(who.Groups, "system:authenticated") {
		t.Fatalf("carol is seen as %q in %v; want the prefixed email and groups", who.Username, who.Groups)
	}

	// The same path vCluster's proxy takes: a TokenReview by the control
	// plane against the virtual API server.
	tr, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: tokenFor("vera", oidcdev.TokenOptions{})},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !tr.Status.Authenticated || tr.Status.User.Username != "oidc:vera@example.com" || !slices.Contains(tr.Status.User.Groups, "oidc:team-a-viewers") {
		t.Fatalf("TokenReview of vera's token: %+v", tr.Status)
	}

	deployment := func(name string) *appsv1.Deployment {
		labels := map[string]string{"app": name}
		return &appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: appsv1.DeploymentSpec{
				Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "train", Image: "busybox"}}},
				},
			},
		}
	}
	createDeployment := func(c kubernetes.Interface, name string) error {
		_, err := c.AppsV1().Deployments(ns).Create(ctx, deployment(name), metav1.CreateOptions{})
		return err
	}
	listDeployments := func(c kubernetes.Interface) ([]string, error) {
		l, err := c.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var names []string
		for _, d := range l.Items {
			names = append(names, d.Name)
		}
		return names, nil
	}
	forbidden := func(what string, err error) {
		t.Helper()
		if !apierrors.IsForbidden(err) {
			t.Errorf("%s: want 403 Forbidden, got %v", what, err)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}
	unauthorized := func(what string, err error) {
		t.Helper()
		if !apierrors.IsUnauthorized(err) {
			t.Errorf("%s: want 401 Unauthorized, got %v", what, err)
		} else {
			t.Logf("%s: %v", what, err)
		}
	}

	// MEMBER (edit): workloads yes, cluster scope no.
	if err := createDeployment(carol, "carol-train"); err != nil {
		t.Fatalf("MEMBER carol cannot create a Deployment: %v", err)
	}
	_, err = carol.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "carol-ns"}}, metav1.CreateOptions{})
	forbidden("MEMBER carol creates a namespace", err)

	// VIEWER through a group (view): list yes, create no.
	vera := as("vera")
	forbidden("VIEWER vera creates a Deployment", createDeployment(vera, "vera-train"))
	if names, err := listDeployments(vera); err != nil || !slices.Equal(names, []string{"carol-train"}) {
		t.Errorf("VIEWER vera lists deployments: %v, %v", names, err)
	}

	// OWNER (cluster-admin): cluster-scoped objects too.
	bob := as("bob")
	if _, err := bob.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bob-ns"}}, metav1.CreateOptions{}); err != nil {
		t.Errorf("OWNER bob cannot create a namespace: %v", err)
	}

	// Another team's members: authenticated, bound to nothing here. erin
	// shares carol's IdP group, which the team did not bind.
	for _, user := range []string{"dan", "erin"} {
		c := as(user)
		_, err := listDeployments(c)
		forbidden(user+" (team-b) lists deployments", err)
		forbidden(user+" (team-b) creates a Deployment", createDeployment(c, user+"-train"))
	}
	// The groups prefix keeps an IdP-asserted system:masters powerless.
	_, err = listDeployments(as("mallory"))
	forbidden("mallory (groups claim system:masters) lists deployments", err)

	// Tokens the authenticator must refuse outright.
	_, err = listDeployments(clientWith(tokenFor("carol", oidcdev.TokenOptions{ExpiredAgo: 10 * time.Minute})))
	unauthorized("carol with an expired token", err)
	_, err = listDeployments(clientWith(tokenFor("carol", oidcdev.TokenOptions{Audience: "some-other-app"})))
	unauthorized("carol with a token for another client", err)
	_, err = listDeployments(clientWith(tokenFor("carol", oidcdev.TokenOptions{})[:40] + "tampered"))
	unauthorized("a malformed token", err)
}

// TestOIDCValuesThroughHelm installs the release with OIDC settings on the
// shared API server and checks what the chart makes of the values: the CA
// ConfigMap, its mount in the control plane container, and the flags in the
// vCluster config; members are not in it, so a member change leaves the
// release alone.
func TestOIDCValuesThroughHelm(t *testing.T) {
	h := newHarness(t)
	settings := h.client.Settings()
	settings.OIDC = oidcTestSettings().OIDC
	c, err := New(h.config, Options{Settings: settings})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	for _, chart := range []string{newChart, oldChart} {
		t.Run(chart, func(t *testing.T) {
			name := h.n("oidc-helm-" + strings.ReplaceAll(chart, ".", ""))
			vc := testVC(name, "team-a", "research", TierShared)
			if chart == oldChart {
				vc = oldVC(name, "team-a", "research", TierShared)
			}
			vc.Members = teamAMembers()
			ns := NamespaceName(name)
			if steps, err := c.Apply(h.ctx, vc); err != nil {
				t.Fatalf("apply: %v (%+v)", err, steps)
			}

			cm, err := h.kube.CoreV1().ConfigMaps(ns).Get(h.ctx, OIDCCAConfigMapName, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("CA ConfigMap from experimental.deploy.host.manifests: %v", err)
			}
			if cm.Data["ca.crt"] != fakeCAPEM {
				t.Errorf("ConfigMap data %q", cm.Data)
			}
			if cm.Annotations["meta.helm.sh/release-name"] != ReleaseName(name) {
				t.Errorf("ConfigMap is not part of the release (annotations %v), so uninstall would leave it", cm.Annotations)
			}

			sts, err := h.kube.AppsV1().StatefulSets(ns).Get(h.ctx, ReleaseName(name), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			pod := sts.Spec.Template.Spec
			volOK := slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool {
				return v.ConfigMap != nil && v.ConfigMap.Name == OIDCCAConfigMapName
			})
			var mountPath string
			for _, ctr := range pod.Containers {
				if ctr.Name != "syncer" {
					continue
				}
				for _, m := range ctr.VolumeMounts {
					if m.Name == oidcCAVolumeName {
						mountPath = m.MountPath
					}
				}
			}
			if !volOK || mountPath+"/ca.crt" != OIDCCAFile {
				t.Errorf("CA volume present %v, mounted in syncer at %q; want %s readable", volOK, mountPath, OIDCCAFile)
			}

			config := vclusterConfig(t, h, ns, name)
			for _, want := range []string{
				"--oidc-issuer-url=https://login.example.com/realms/gpu",
				"--oidc-ca-file=" + OIDCCAFile,
			} {
				if !strings.Contains(config, want) {
					t.Errorf("vCluster config lacks %q", want)
				}
			}
			if strings.Contains(config, "oidc:bob@example.com") {
				t.Error("members are in the vCluster config: a member change would restart the control plane")
			}

			// A member change: same values, nothing sent to Helm.
			vc.Members = append(vc.Members, Member{Kind: MemberKindUser, Name: "dave@example.com", Role: RoleMember})
			if o, err := c.Observe(h.ctx, vc); err != nil || !o.ReleaseUpToDate {
				t.Errorf("after a member change the release must stay up to date (up to date %v, err %v)", o.ReleaseUpToDate, err)
			}
			if res, err := c.EnsureRelease(h.ctx, vc); err != nil || res.Action != "unchanged" {
				t.Errorf("member change: %+v, %v; want unchanged", res, err)
			}
		})
	}
}

// vclusterConfig is the values the chart hands the vCluster control plane
// (Secret vc-config-<release>, key config.yaml), re-encoded so the check
// does not depend on how the chart quotes strings.
func vclusterConfig(t *testing.T, h *harness, ns, release string) string {
	t.Helper()
	sec, err := h.kube.CoreV1().Secrets(ns).Get(h.ctx, "vc-config-"+release, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(sec.Data["config.yaml"], &cfg); err != nil {
		t.Fatal(err)
	}
	out, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// aggregateClusterRoles plays kube-controller-manager's clusterrole
// aggregation controller, which envtest does not run: the built-in edit,
// view and admin roles are bootstrapped with an aggregationRule and no rules
// of their own. It repeats until nothing changes, because aggregated roles
// are themselves aggregated (view into edit, edit into admin).
func aggregateClusterRoles(t *testing.T, ctx context.Context, kube kubernetes.Interface) {
	t.Helper()
	for pass := 0; ; pass++ {
		if pass == 10 {
			t.Fatal("cluster role aggregation does not settle")
		}
		roles, err := kube.RbacV1().ClusterRoles().List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		changed := false
		for _, role := range roles.Items {
			if role.AggregationRule == nil {
				continue
			}
			var rules []rbacv1.PolicyRule
			for _, sel := range role.AggregationRule.ClusterRoleSelectors {
				selector, err := metav1.LabelSelectorAsSelector(&sel)
				if err != nil {
					t.Fatal(err)
				}
				for _, other := range roles.Items {
					if other.Name == role.Name || !selector.Matches(labels.Set(other.Labels)) {
						continue
					}
					for _, r := range other.Rules {
						if !slices.ContainsFunc(rules, func(have rbacv1.PolicyRule) bool { return equality.Semantic.DeepEqual(have, r) }) {
							rules = append(rules, r)
						}
					}
				}
			}
			if equality.Semantic.DeepEqual(rules, role.Rules) {
				continue
			}
			role.Rules = rules
			if _, err := kube.RbacV1().ClusterRoles().Update(ctx, &role, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			changed = true
		}
		if !changed {
			return
		}
	}
}
