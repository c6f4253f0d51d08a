package rbacproof

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gpuplane/gpuplane/deploy/charttest"
	"github.com/gpuplane/gpuplane/internal/devenv"
	"github.com/gpuplane/gpuplane/internal/devenv/vclusterchart"
	"github.com/gpuplane/gpuplane/internal/envtestenv"
)

// One API server for the package, started on first use.
var shared struct {
	once  sync.Once
	env   *envtestenv.Env
	admin *rest.Config
	kube  kubernetes.Interface
	// virtual is a second API server standing in for every virtual
	// cluster's: the worker applies the team's RBAC in it through the admin
	// kubeconfig the simulated control plane publishes.
	virtual *envtestenv.Env
	caPEM   []byte            // a CA certificate: the OIDC issuer's private CA, and vCluster's
	charts  map[string]string // chart version -> its directory in the Go module cache
	err     error
}

func TestMain(m *testing.M) {
	ctrllog.SetLogger(logr.Discard())
	klog.SetLogger(logr.Discard())
	code := m.Run()
	if shared.env != nil {
		_ = shared.env.Stop()
	}
	if shared.virtual != nil {
		_ = shared.virtual.Stop()
	}
	os.Exit(code)
}

// env fails (never skips) without the envtest binaries.
func env(t *testing.T) {
	t.Helper()
	envtestenv.SkipIfShort(t)
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if shared.charts, shared.err = vclusterchart.Dirs(ctx, defaultChart, oldChart); shared.err != nil {
			return
		}
		if shared.caPEM, shared.err = selfSignedCA(); shared.err != nil {
			return
		}
		if shared.env, shared.err = envtestenv.Start(ctx, envtestenv.Options{}); shared.err != nil {
			return
		}
		if shared.virtual, shared.err = envtestenv.Start(ctx, envtestenv.Options{}); shared.err != nil {
			return
		}
		shared.admin = shared.env.RESTConfig()
		shared.kube = kubernetes.NewForConfigOrDie(shared.admin)
		// Capacity is read from nodes; the dev host cluster has none of its own.
		shared.err = devenv.CreateNodes(ctx, shared.kube, devenv.DemoNodes)
	})
	if shared.err != nil {
		t.Fatalf("real API server needed: %v", shared.err)
	}
}

// perm is one permission: a verb on a resource ("pods/exec" for a
// subresource) of an API group ("" is the core group).
type perm struct{ Group, Resource, Verb string }

func (p perm) String() string {
	g := p.Group
	if g == "" {
		g = "core"
	}
	return p.Verb + " " + g + "/" + p.Resource
}

// expand lists the permissions of rules. The chart must not use wildcards,
// resourceNames or nonResourceURLs: they cannot be proven minimal one
// permission at a time, and wildcards are never least privilege.
func expand(t *testing.T, rules []rbacv1.PolicyRule) []perm {
	t.Helper()
	seen := map[perm]bool{}
	var out []perm
	for _, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Fatalf("rule %s uses resourceNames or nonResourceURLs; the proof does not cover those", r.String())
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if g == "*" || res == "*" || v == "*" || strings.Contains(res, "*") {
						t.Fatalf("rule %s uses a wildcard", r.String())
					}
					p := perm{g, res, v}
					if !seen[p] {
						seen[p] = true
						out = append(out, p)
					}
				}
			}
		}
	}
	return out
}

func rulesOf(perms []perm) []rbacv1.PolicyRule {
	out := make([]rbacv1.PolicyRule, 0, len(perms))
	for _, p := range perms {
		out = append(out, rbacv1.PolicyRule{APIGroups: []string{p.Group}, Resources: []string{p.Resource}, Verbs: []string{p.Verb}})
	}
	return out
}

// chartGrant is what the chart grants one ServiceAccount.
type chartGrant struct {
	ServiceAccount, Namespace string
	ClusterRoles              []*rbacv1.ClusterRole
	Roles                     []*rbacv1.Role // in Namespace
}

// Rules are the rules of every role of the grant.
func (g chartGrant) Rules() []rbacv1.PolicyRule {
	var out []rbacv1.PolicyRule
	for _, r := range g.ClusterRoles {
		out = append(out, r.Rules...)
	}
	for _, r := range g.Roles {
		out = append(out, r.Rules...)
	}
	return out
}

// chartGrants renders the chart with its default values and returns, per
// Deployment (component), the ServiceAccount its pods run as and the
// ClusterRoles and Roles the chart binds to that ServiceAccount.
func chartGrants(t *testing.T) map[string]chartGrant {
	t.Helper()
	r, err := charttest.Render(charttest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	convert := func(o *unstructured.Unstructured, into any) {
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, into); err != nil {
			t.Fatalf("%s: %v", charttest.Key(o), err)
		}
	}
	out := map[string]chartGrant{}
	for _, d := range r.OfKind("Deployment") {
		component := d.GetLabels()["app.kubernetes.io/component"]
		sa, _, _ := unstructured.NestedString(d.Object, "spec", "template", "spec", "serviceAccountName")
		if sa == "" {
			t.Fatalf("Deployment %s runs as no named ServiceAccount", d.GetName())
		}
		g := chartGrant{ServiceAccount: sa, Namespace: d.GetNamespace()}
		isSubject := func(subjects []rbacv1.Subject, bindingNS string) bool {
			return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
				ns := s.Namespace
				if ns == "" {
					ns = bindingNS
				}
				return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && ns == g.Namespace
			})
		}
		clusterRole := func(name string) *rbacv1.ClusterRole {
			o := r.Find("ClusterRole", name)
			if o == nil {
				t.Fatalf("the chart binds ServiceAccount %s to ClusterRole %s, which it does not render", sa, name)
			}
			var cr rbacv1.ClusterRole
			convert(o, &cr)
			return &cr
		}
		for _, o := range r.OfKind("ClusterRoleBinding") {
			var b rbacv1.ClusterRoleBinding
			convert(o, &b)
			if isSubject(b.Subjects, "") {
				g.ClusterRoles = append(g.ClusterRoles, clusterRole(b.RoleRef.Name))
			}
		}
		for _, o := range r.OfKind("RoleBinding") {
			var b rbacv1.RoleBinding
			convert(o, &b)
			if !isSubject(b.Subjects, b.Namespace) {
				continue
			}
			if b.Namespace != g.Namespace {
				t.Fatalf("RoleBinding %s/%s is outside the release namespace; extend the proof", b.Namespace, b.Name)
			}
			if b.RoleRef.Kind == "ClusterRole" {
				t.Fatalf("RoleBinding %s binds a ClusterRole in one namespace; extend the proof", b.Name)
			}
			o := r.Find("Role", b.RoleRef.Name)
			if o == nil {
				t.Fatalf("RoleBinding %s names Role %s, which the chart does not render", b.Name, b.RoleRef.Name)
			}
			var role rbacv1.Role
			convert(o, &role)
			g.Roles = append(g.Roles, &role)
		}
		out[component] = g
	}
	return out
}

// identity is a ServiceAccount on the test API server with its own token,
// bound to a set of roles.
type identity struct {
	user   string
	groups []string
	config *rest.Config // authenticates with the ServiceAccount's token
	denied *denials
}

// grantSpec says what to bind to a fresh ServiceAccount: cluster-wide rules
// (one ClusterRole each) and rules in the ServiceAccount's namespace (one
// Role each).
type grantSpec struct {
	ClusterRules [][]rbacv1.PolicyRule
	Rules        [][]rbacv1.PolicyRule
}

// newIdentity creates ServiceAccount name in ns, binds it to spec and waits
// until the authorizer agrees: every permission in spec allowed, and each
// of absent denied.
func newIdentity(t *testing.T, ctx context.Context, ns, name string, spec grantSpec, absent ...perm) *identity {
	t.Helper()
	kube := shared.kube
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := kube.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	subject := []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: ns}}
	for i, rules := range spec.ClusterRules {
		roleName := fmt.Sprintf("rbacproof-%s-%s-%d", ns, name, i)
		if _, err := kube.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: roleName}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: roleName}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i, rules := range spec.Rules {
		roleName := fmt.Sprintf("rbacproof-%s-%d", name, i)
		if _, err := kube.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: roleName}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: roleName}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: roleName},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	id := &identity{
		user:   "system:serviceaccount:" + ns + ":" + name,
		groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
		denied: &denials{},
	}
	// The RBAC authorizer reads roles and bindings from informers: wait until
	// it has seen them, so no denial below is an artefact of propagation.
	var want []perm
	for _, rules := range spec.ClusterRules {
		want = append(want, expand(t, rules)...)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		pending := ""
		for _, p := range want {
			if !id.allowed(t, ctx, p, "") {
				pending = "allowed " + p.String()
				break
			}
		}
		for _, rules := range spec.Rules {
			for _, p := range expand(t, rules) {
				if pending == "" && !id.allowed(t, ctx, p, ns) {
					pending = "allowed " + p.String() + " in " + ns
				}
			}
		}
		for _, p := range absent {
			if pending == "" && id.allowed(t, ctx, p, "") {
				pending = "denied " + p.String()
			}
		}
		if pending == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("authorizer never reported %s for %s", pending, id.user)
		}
		time.Sleep(50 * time.Millisecond)
	}

	tr, err := kube.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(shared.admin)
	cfg.BearerToken = tr.Status.Token
	cfg.QPS, cfg.Burst = 100, 200
	cfg.Wrap(id.denied.wrap)
	// The token really authenticates as the ServiceAccount.
	review, err := kubernetes.NewForConfigOrDie(cfg).AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := review.Status.UserInfo.Username; got != id.user {
		t.Fatalf("token authenticates as %q, want %q", got, id.user)
	}
	id.config = cfg
	return id
}

func (id *identity) allowed(t *testing.T, ctx context.Context, p perm, ns string) bool {
	t.Helper()
	res, sub, _ := strings.Cut(p.Resource, "/")
	sar, err := shared.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, &authorizationv1.SubjectAccessReview{
		Spec: authorizationv1.SubjectAccessReviewSpec{
			User: id.user, Groups: id.groups,
			ResourceAttributes: &authorizationv1.ResourceAttributes{
				Group: p.Group, Resource: res, Subresource: sub, Verb: p.Verb, Namespace: ns,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return sar.Status.Allowed
}

func ptr[T any](v T) *T { return &v }

// selfSignedCA is a throwaway CA certificate in PEM.
func selfSignedCA() ([]byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "rbacproof test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), nil
}

// denials records every 403 the API server answers one identity with, and
// reads the RBAC ones back as permissions.
type denials struct {
	mu       sync.Mutex
	messages []string
}

func (d *denials) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		resp, err := rt.RoundTrip(req)
		if err != nil || resp.StatusCode != http.StatusForbidden {
			return resp, err
		}
		body, rerr := io.ReadAll(resp.Body)
		resp.Body.Close()
		resp.Body = io.NopCloser(bytes.NewReader(body))
		msg := string(body)
		var st metav1.Status
		if rerr == nil && json.Unmarshal(body, &st) == nil && st.Message != "" {
			msg = st.Message
		}
		d.mu.Lock()
		d.messages = append(d.messages, req.Method+" "+req.URL.Path+": "+msg)
		d.mu.Unlock()
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

var (
	// The authorizer's refusal: `User "..." cannot get resource "pods/log"
	// in API group "" in the namespace "x"` (or "at the cluster scope").
	cannotRE = regexp.MustCompile(`cannot (\S+) resource "([^"]+)" in API group "([^"]*)"`)
	// RBAC's escalation check on creating or binding a role: the
	// permissions the caller lacks, one compact rule per line, e.g.
	// {APIGroups:["apps"], Resources:["statefulsets"], Verbs:["get"]}.
	escalationMarker = "attempting to grant RBAC permissions not currently held"
	missingRuleRE    = regexp.MustCompile(`\{APIGroups:\[([^\]]*)\], Resources:\[([^\]]*)\], (?:ResourceNames:\[[^\]]*\], )?Verbs:\[([^\]]*)\]\}`)
	quotedRE         = regexp.MustCompile(`"([^"]*)"`)
)

// RBAC returns the permissions named by RBAC denials, and every 403
// message (RBAC or not: admission policies answer 403 too).
func (d *denials) RBAC() (perms []perm, messages []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	seen := map[perm]bool{}
	add := func(p perm) {
		if !seen[p] {
			seen[p] = true
			perms = append(perms, p)
		}
	}
	list := func(s string) []string {
		var out []string
		for _, m := range quotedRE.FindAllStringSubmatch(s, -1) {
			out = append(out, m[1])
		}
		return out
	}
	for _, msg := range d.messages {
		if m := cannotRE.FindStringSubmatch(msg); m != nil {
			add(perm{Group: m[3], Resource: m[2], Verb: m[1]})
		}
		if strings.Contains(msg, escalationMarker) {
			for _, m := range missingRuleRE.FindAllStringSubmatch(msg, -1) {
				for _, g := range list(m[1]) {
					for _, r := range list(m[2]) {
						for _, v := range list(m[3]) {
							add(perm{g, r, v})
						}
					}
				}
			}
		}
	}
	return perms, slices.Clone(d.messages)
}
