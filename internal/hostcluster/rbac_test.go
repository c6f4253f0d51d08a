package hostcluster

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
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
		{"gpuplane:tenant-members", "edit", []string{"User oidc:anna@example.com", "User oidc:carol@example.com"}},
		{"gpuplane:tenant-owners", "cluster-admin", []string{"Group oidc:ml-leads", "User oidc:bob@example.com"}},
		{"gpuplane:tenant-viewers", "view", []string{"Group oidc:team-a-viewers"}},
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
	if a, b := RenderTenantRBAC(vc, oidcTestSettings()), RenderTenantRBAC(reversed, oidcTestSettings()); !reflect.DeepEqual(a, b) {
		t.Errorf("member order changed the bindings:\n%+v\n---- vs ----\n%+v", a, b)
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
	if got := RenderTenantRBAC(vc, plain); len(got) != 1 || got[0].Name != "gpuplane:tenant-viewers" {
		t.Errorf("viewers only: %+v", got)
	}
	vc.Members = nil
	if got := RenderTenantRBAC(vc, plain); len(got) != 0 {
		t.Errorf("no members: %+v", got)
	}
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
	apiServer, _ := nestedMap(t, values, "controlPlane", "distro", "k8s")["apiServer"].(map[string]any)
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
	if tag := nestedMap(t, v, "controlPlane", "distro", "k8s", "image")["tag"]; tag != "v1.35.0" {
		t.Errorf("distro image tag lost: %v", tag)
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
	if _, ok := nestedMap(t, v, "experimental", "deploy")["vcluster"]; ok {
		t.Error("the team's RBAC must not be in the values (a member change would restart the control plane)")
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
	if _, ok := nestedMap(t, v, "experimental")["deploy"]; ok {
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

// TestMemberChangeKeepsValues: members are not part of the chart's
// values, so no member change can change the control plane's pod template
// (the chart hashes every value into it). Proven on a real API server in
// internal/reconcile (TestMemberChangeKeepsControlPlane).
func TestMemberChangeKeepsValues(t *testing.T) {
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
	changes := map[string]func([]Member) []Member{
		"added": func(m []Member) []Member {
			return append(m, Member{Kind: MemberKindUser, Name: "dave@example.com", Role: RoleViewer})
		},
		"removed":       func(m []Member) []Member { return m[1:] },
		"role changed":  func(m []Member) []Member { m[0].Role = RoleViewer; return m },
		"group renamed": func(m []Member) []Member { m[2].Name = "team-a-readers"; return m },
		"all gone":      func([]Member) []Member { return nil },
	}
	for name, change := range changes {
		vc := base
		vc.Members = change(slices.Clone(base.Members))
		if hash(vc) != h0 {
			t.Errorf("%s: values changed, the release would be upgraded and the control plane restarted", name)
		}
		if reflect.DeepEqual(RenderTenantRBAC(vc, s), RenderTenantRBAC(base, s)) {
			t.Errorf("%s: the bindings did not change", name)
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
