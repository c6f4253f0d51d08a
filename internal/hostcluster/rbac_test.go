package hostcluster

import (
	"context"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/internal/devenv/vclusterchart"
)

// A syntactically valid PEM block is enough for rendering; the real CA is
// used in oidc_test.go.
const fakeCAPEM = "-----BEGIN CERTIFICATE-----\nMIIBfake\n-----END CERTIFICATE-----\n"

func oidcTestSettings() Settings {
	return Settings{OIDC: OIDCSettings{
		IssuerURL:      "https://login.example.com/realms/gpu",
		ClientID:       "gpuplane",
		UsernameClaim:  "email",
		UsernamePrefix: "oidc:",
		GroupsClaim:    "groups",
		GroupsPrefix:   "oidc:",
		CACertPEM:      []byte(fakeCAPEM),
	}}
}

func teamAMembers() []Member {
	return []Member{
		{Kind: MemberKindUser, Name: "carol@example.com", Role: RoleMember},
		{Kind: MemberKindUser, Name: "bob@example.com", Role: RoleOwner},
		{Kind: MemberKindGroup, Name: "team-a-viewers", Role: RoleViewer},
	}
}

func TestRenderTenantRBAC(t *testing.T) {
	vc := testVC("ml-dev", "team-a", "research", TierShared)
	vc.Members = append(teamAMembers(),
		Member{Kind: MemberKindUser, Name: "anna@example.com", Role: RoleMember},
		Member{Kind: MemberKindUser, Name: "carol@example.com", Role: RoleMember}, // duplicate
		Member{Kind: MemberKindGroup, Name: "ml-leads", Role: RoleOwner},
		Member{Kind: "robot", Name: "r2", Role: RoleOwner},                 // unknown kind
		Member{Kind: MemberKindUser, Name: "x@example.com", Role: "ADMIN"}, // unknown role
		Member{Kind: MemberKindUser, Name: "  ", Role: RoleViewer},         // empty name
	)
	got := RenderTenantRBAC(vc, oidcTestSettings())

	type want struct {
		name, role string
		subjects   []string
	}
	wants := []want{
		{"gpuplane:team-members", "edit", []string{"User oidc:anna@example.com", "User oidc:carol@example.com"}},
		{"gpuplane:team-owners", "cluster-admin", []string{"Group oidc:ml-leads", "User oidc:bob@example.com"}},
		{"gpuplane:team-viewers", "view", []string{"Group oidc:team-a-viewers"}},
	}
	if len(got) != len(wants) {
		t.Fatalf("got %d bindings, want %d: %+v", len(got), len(wants), got)
	}
	for i, w := range wants {
		b := got[i]
		if b.Name != w.name || b.RoleRef.Name != w.role || b.RoleRef.Kind != "ClusterRole" || b.RoleRef.APIGroup != rbacv1.GroupName {
			t.Errorf("binding %d: %s -> %+v, want %s -> %s", i, b.Name, b.RoleRef, w.name, w.role)
		}
		var subs []string
		for _, s := range b.Subjects {
			if s.APIGroup != rbacv1.GroupName {
				t.Errorf("%s: subject %s has apiGroup %q", b.Name, s.Name, s.APIGroup)
			}
			subs = append(subs, s.Kind+" "+s.Name)
		}
		if !slices.Equal(subs, w.subjects) {
			t.Errorf("%s subjects %v, want %v", b.Name, subs, w.subjects)
		}
		if b.Labels[LabelVirtualCluster] != "ml-dev" || b.Labels[LabelManagedBy] != ManagedByValue {
			t.Errorf("%s labels %v", b.Name, b.Labels)
		}
	}

	// Order of members does not matter; equal input, equal text.
	reversed := vc
	reversed.Members = slices.Clone(vc.Members)
	slices.Reverse(reversed.Members)
	a, err := RenderTenantRBACManifests(vc, oidcTestSettings())
	if err != nil {
		t.Fatal(err)
	}
	b, err := RenderTenantRBACManifests(reversed, oidcTestSettings())
	if err != nil {
		t.Fatal(err)
	}
	if a != b {
		t.Errorf("member order changed the manifests:\n%s\n---- vs ----\n%s", a, b)
	}

	// No prefixes: subjects are the bare names.
	plain := oidcTestSettings()
	plain.OIDC.UsernamePrefix, plain.OIDC.GroupsPrefix = "", ""
	vc.Members = teamAMembers()
	for _, bnd := range RenderTenantRBAC(vc, plain) {
		for _, s := range bnd.Subjects {
			if strings.HasPrefix(s.Name, "oidc:") {
				t.Errorf("%s: subject %s still prefixed", bnd.Name, s.Name)
			}
		}
	}

	// Only viewers: a single binding.
	vc.Members = []Member{{Kind: MemberKindUser, Name: "v@example.com", Role: RoleViewer}}
	if got := RenderTenantRBAC(vc, plain); len(got) != 1 || got[0].Name != "gpuplane:team-viewers" {
		t.Errorf("viewers only: %+v", got)
	}
	vc.Members = nil
	if got := RenderTenantRBAC(vc, plain); len(got) != 0 {
		t.Errorf("no members: %+v", got)
	}
	if m, err := RenderTenantRBACManifests(vc, plain); err != nil || m != "" {
		t.Errorf("no members: manifests %q, %v", m, err)
	}
}

func TestRenderTenantRBACManifestsParse(t *testing.T) {
	vc := testVC("ml-dev", "team-a", "research", TierShared)
	vc.Members = teamAMembers()
	text, err := RenderTenantRBACManifests(vc, oidcTestSettings())
	if err != nil {
		t.Fatal(err)
	}
	bindings := parseBindings(t, text)
	if want := RenderTenantRBAC(vc, oidcTestSettings()); len(bindings) != len(want) {
		t.Fatalf("parsed %d bindings, rendered %d:\n%s", len(bindings), len(want), text)
	}
	for i, b := range bindings {
		if b.APIVersion != "rbac.authorization.k8s.io/v1" || b.Kind != "ClusterRoleBinding" {
			t.Errorf("document %d: %s %s", i, b.APIVersion, b.Kind)
		}
	}
}

// parseBindings splits a manifests string the way vCluster's deployer does
// (YAML documents) and decodes each strictly.
func parseBindings(t *testing.T, text string) []rbacv1.ClusterRoleBinding {
	t.Helper()
	var out []rbacv1.ClusterRoleBinding
	for _, doc := range strings.Split(text, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var b rbacv1.ClusterRoleBinding
		if err := yaml.UnmarshalStrict([]byte(doc), &b); err != nil {
			t.Fatalf("document does not decode as a ClusterRoleBinding: %v\n%s", err, doc)
		}
		out = append(out, b)
	}
	return out
}

func nestedMap(t *testing.T, v map[string]any, path ...string) map[string]any {
	t.Helper()
	for _, p := range path {
		next, ok := v[p].(map[string]any)
		if !ok {
			t.Fatalf("values have no map at %s (stuck at %q)", strings.Join(path, "."), p)
		}
		v = next
	}
	return v
}

func extraArgs(t *testing.T, values map[string]any) []string {
	t.Helper()
	apiServer := nestedMap(t, values, "controlPlane", "distro", "k8s", "apiServer")
	raw, _ := apiServer["extraArgs"].([]any)
	var out []string
	for _, a := range raw {
		out = append(out, a.(string))
	}
	return out
}

func TestRenderVClusterValuesOIDC(t *testing.T) {
	vc := testVC("ml-dev", "team-a", "research", TierShared)
	vc.Members = teamAMembers()
	s := oidcTestSettings()
	v := RenderVClusterValues(vc, s)

	if on := nestedMap(t, v, "controlPlane", "distro", "k8s")["enabled"]; on != true {
		t.Errorf("k8s distro enabled = %v", on)
	}
	wantArgs := []string{
		"--oidc-issuer-url=https://login.example.com/realms/gpu",
		"--oidc-client-id=gpuplane",
		"--oidc-username-claim=email",
		"--oidc-username-prefix=oidc:",
		"--oidc-groups-claim=groups",
		"--oidc-groups-prefix=oidc:",
		"--oidc-ca-file=/etc/gpuplane/oidc/ca.crt",
	}
	if got := extraArgs(t, v); !slices.Equal(got, wantArgs) {
		t.Errorf("extraArgs\n got %q\nwant %q", got, wantArgs)
	}
	if tag := nestedMap(t, v, "controlPlane", "distro", "k8s", "apiServer", "image")["tag"]; tag != "v1.30.2" {
		t.Errorf("apiServer image tag lost: %v", tag)
	}

	persistence := nestedMap(t, v, "controlPlane", "statefulSet", "persistence")
	vols := persistence["addVolumes"].([]any)
	mounts := persistence["addVolumeMounts"].([]any)
	if len(vols) != 1 || len(mounts) != 1 {
		t.Fatalf("volumes %v mounts %v", vols, mounts)
	}
	vol, mount := vols[0].(map[string]any), mounts[0].(map[string]any)
	if vol["name"] != mount["name"] || vol["configMap"].(map[string]any)["name"] != OIDCCAConfigMapName {
		t.Errorf("volume %v does not match mount %v", vol, mount)
	}
	if mount["mountPath"].(string)+"/ca.crt" != OIDCCAFile {
		t.Errorf("mount path %v does not hold %s", mount["mountPath"], OIDCCAFile)
	}
	host := nestedMap(t, v, "experimental", "deploy", "host")["manifests"].(string)
	for _, want := range []string{"kind: ConfigMap", "name: " + OIDCCAConfigMapName, "namespace: vc-ml-dev", "ca.crt: |", "MIIBfake"} {
		if !strings.Contains(host, want) {
			t.Errorf("host manifests lack %q:\n%s", want, host)
		}
	}
	manifests := nestedMap(t, v, "experimental", "deploy", "vcluster")["manifests"].(string)
	if want, _ := RenderTenantRBACManifests(vc, s); manifests != want || manifests == "" {
		t.Errorf("vcluster manifests are not the rendered RBAC:\n%s", manifests)
	}
	if nestedMap(t, v, "experimental", "syncSettings")["setOwner"] != false {
		t.Error("OIDC must not replace the sync settings")
	}

	// Without a CA: system roots, nothing mounted, no host manifests.
	noCA := s
	noCA.OIDC.CACertPEM = nil
	v = RenderVClusterValues(vc, noCA)
	if args := extraArgs(t, v); slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--oidc-ca-file") }) {
		t.Errorf("--oidc-ca-file without a CA: %v", args)
	}
	if _, ok := nestedMap(t, v, "controlPlane", "statefulSet")["persistence"]; ok {
		t.Error("volumes rendered without a CA")
	}
	if _, ok := nestedMap(t, v, "experimental", "deploy")["host"]; ok {
		t.Error("host manifests rendered without a CA")
	}

	// Defaults: empty prefixes and claims.
	minimal := Settings{OIDC: OIDCSettings{IssuerURL: "https://idp.example.com"}}
	wantArgs = []string{
		"--oidc-issuer-url=https://idp.example.com",
		"--oidc-client-id=gpuplane",
		"--oidc-username-claim=email",
		"--oidc-username-prefix=-", // "no prefix", not kube-apiserver's "<issuer>#"
		"--oidc-groups-claim=groups",
	}
	if got := extraArgs(t, RenderVClusterValues(vc, minimal)); !slices.Equal(got, wantArgs) {
		t.Errorf("defaults\n got %q\nwant %q", got, wantArgs)
	}

	// No OIDC: nothing of the above.
	v = RenderVClusterValues(vc, Settings{})
	if got := extraArgs(t, v); len(got) != 0 {
		t.Errorf("extraArgs without OIDC: %v", got)
	}
	if _, ok := nestedMap(t, v, "experimental")["deploy"]; ok {
		t.Error("deploy rendered without OIDC")
	}
}

func TestMemberChangeChangesValuesHash(t *testing.T) {
	s := oidcTestSettings()
	base := testVC("ml-dev", "team-a", "research", TierShared)
	base.Members = teamAMembers()
	hash := func(vc VirtualCluster) string {
		t.Helper()
		v, err := jsonRoundTrip(RenderVClusterValues(vc, s))
		if err != nil {
			t.Fatal(err)
		}
		return valuesHash(v, "chart")
	}
	h0 := hash(base)

	same := base
	same.Members = slices.Clone(base.Members)
	slices.Reverse(same.Members)
	if hash(same) != h0 {
		t.Error("reordered members changed the hash: every resync would upgrade the release")
	}

	changes := map[string]func([]Member) []Member{
		"added": func(m []Member) []Member {
			return append(m, Member{Kind: MemberKindUser, Name: "dave@example.com", Role: RoleViewer})
		},
		"removed":      func(m []Member) []Member { return m[1:] },
		"role changed": func(m []Member) []Member { m[0].Role = RoleViewer; return m },
		"group renamed": func(m []Member) []Member {
			m[2].Name = "team-a-readers"
			return m
		},
	}
	for name, change := range changes {
		vc := base
		vc.Members = change(slices.Clone(base.Members))
		if hash(vc) == h0 {
			t.Errorf("%s: values hash unchanged, the release would not be upgraded", name)
		}
	}

	// Without OIDC members do not shape the values at all.
	s = Settings{}
	h0 = hash(base)
	vc := base
	vc.Members = nil
	if hash(vc) != h0 {
		t.Error("without OIDC, members changed the values")
	}
}

func TestOIDCValuesMatchChartSchema(t *testing.T) {
	dir, err := vclusterchart.Dir(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	noCA := oidcTestSettings()
	noCA.OIDC.CACertPEM = nil
	for _, tc := range []struct {
		name string
		vc   VirtualCluster
		s    Settings
	}{
		{"shared", testVC("a", "t", "d", TierShared), oidcTestSettings()},
		{"dedicated", testVC("b", "t", "d", TierDedicated), oidcTestSettings()},
		{"no CA", testVC("c", "t", "d", TierShared), noCA},
		{"no members", testVC("e", "t", "d", TierShared), Settings{OIDC: OIDCSettings{IssuerURL: "https://idp.example.com"}}},
	} {
		if tc.name != "no members" {
			tc.vc.Members = teamAMembers()
		}
		if err := ValidateValues(dir, RenderVClusterValues(tc.vc, tc.s)); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func TestOIDCSettingsValidate(t *testing.T) {
	for _, tc := range []struct {
		o       OIDCSettings
		wantErr string
	}{
		{OIDCSettings{}, ""},
		{OIDCSettings{IssuerURL: "https://idp.example.com"}, ""},
		{OIDCSettings{IssuerURL: "http://127.0.0.1:5556"}, "https"},
		{OIDCSettings{IssuerURL: "https://"}, "https"},
		{OIDCSettings{IssuerURL: "https://idp.example.com", CACertPEM: []byte("not a pem")}, "PEM"},
	} {
		err := tc.o.Validate()
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%+v: %v", tc.o, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%+v: error %v, want one mentioning %q", tc.o, err, tc.wantErr)
		}
	}
}
