package api

import (
	"context"
	"encoding/base64"
	"fmt"
	"regexp"
	"strings"

	"sigs.k8s.io/yaml"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/audit"
	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/identity"
	"github.com/gpuplane/gpuplane/internal/names"
	"github.com/gpuplane/gpuplane/internal/store"
	"github.com/gpuplane/gpuplane/internal/tenancy"
	"github.com/gpuplane/gpuplane/internal/virtualcluster"
)

// Reasons of GetVirtualClusterKubeconfig's FAILED_PRECONDITION answers.
const (
	// ReasonVirtualClusterNotReady: the virtual cluster is not READY or
	// DEGRADED, or its endpoint is not known yet.
	ReasonVirtualClusterNotReady = "VIRTUAL_CLUSTER_NOT_READY"
	// ReasonKubeconfigUnavailable: the host cluster has not published the
	// CA or the admin kubeconfig (yet), or there is no host cluster.
	ReasonKubeconfigUnavailable = "KUBECONFIG_UNAVAILABLE"
)

// The kubeconfig credential plugin: the CLI prints an ExecCredential with
// the caller's own OIDC ID token, so the virtual cluster's API server (which
// trusts the same issuer) sees the user, never a shared admin identity.
const (
	ExecPluginCommand    = "gpuplanectl"
	ExecPluginAPIVersion = "client.authentication.k8s.io/v1"
	execInstallHint      = "gpuplanectl (the gpuplane CLI) provides credentials for this cluster; install it with\n" +
		"  go install github.com/gpuplane/gpuplane/cmd/gpuplanectl@latest\nand run 'gpuplanectl login'."
	// ActionBreakGlassKubeconfig is the audit action of every break-glass
	// kubeconfig handed out.
	ActionBreakGlassKubeconfig = "BreakGlassKubeconfig"
)

// apiEndpointPattern: host:port, a URL or a gRPC target; nothing a shell
// or the plugin's flag parser could read as something else.
var apiEndpointPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9.\-_:\[\]/%]*$`)

// GetVirtualClusterKubeconfig hands a team member a kubeconfig for one of
// the team's virtual clusters: its endpoint and CA, and the gpuplanectl
// credential plugin as the user. Platform admins may ask for break_glass
// and get the vCluster's own admin kubeconfig instead; that is audited.
//
// Authorization: a caller who cannot read the team gets NOT_FOUND; one who
// can read it but holds no role on it (department and platform admins)
// gets PERMISSION_DENIED, as does anyone but a platform admin asking for
// break glass.
func (s *VirtualClusters) GetVirtualClusterKubeconfig(ctx context.Context, req *pb.GetVirtualClusterKubeconfigRequest) (*pb.VirtualClusterKubeconfig, error) {
	teamID, vcID, err := names.ParseVirtualCluster("name", req.GetName())
	if err != nil {
		return nil, err
	}
	a, err := s.access(ctx)
	if err != nil {
		return nil, err
	}
	team, err := tenancy.GetTeam(ctx, s.db, teamID, false)
	if err != nil {
		if errs.KindOf(err) == errs.KindNotFound {
			return nil, errs.NotFound(req.GetName())
		}
		return nil, err
	}
	if !a.CanReadTeam(team.ID, team.Department) {
		return nil, errs.NotFound(req.GetName())
	}
	v, err := virtualcluster.GetOfTeam(ctx, s.db, teamID, vcID)
	if err != nil {
		if err != nil && errs.KindOf(err) != errs.KindNotFound {
			return nil, err
		}
		return nil, errs.NotFound(req.GetName())
	}
	if req.GetBreakGlass() {
		if !a.PlatformAdmin {
			return nil, errs.PermissionDenied("break-glass kubeconfigs are for platform admins only")
		}
	} else if !a.CanUseVirtualClusters(team.ID) {
		msg := "only members of %s may get a kubeconfig for its virtual clusters"
		if a.PlatformAdmin {
			msg += "; platform admins may use break_glass (audited)"
		}
		return nil, errs.PermissionDenied(msg, names.Team(team.ID))
	}
	if v.Phase == virtualcluster.PhaseSleeping || v.Spec.Sleep {
		return nil, errs.FailedPrecondition(ReasonVirtualClusterNotReady,
			"%s is asleep (its control plane is scaled to zero); wake it with :wake, then ask again", req.GetName()).
			With("resource", req.GetName()).With("phase", string(v.Phase))
	}
	if !v.Phase.IsReachable() {
		return nil, errs.FailedPrecondition(ReasonVirtualClusterNotReady,
			"%s is %s; a kubeconfig is available once it is READY", req.GetName(), v.Phase).
			With("resource", req.GetName()).With("phase", string(v.Phase))
	}
	if v.Endpoint == "" {
		return nil, errs.FailedPrecondition(ReasonVirtualClusterNotReady,
			"the API server address of %s is not known yet", req.GetName()).With("resource", req.GetName())
	}
	// Someone is about to use it: not idle (auto-sleep).
	if err := virtualcluster.Touch(ctx, s.db, v.ID); err != nil {
		return nil, err
	}
	if req.GetBreakGlass() {
		return s.breakGlassKubeconfig(ctx, a, team, v)
	}

	apiEndpoint := req.GetApiEndpoint()
	field := "api_endpoint"
	if apiEndpoint == "" {
		apiEndpoint, field = s.apiEndpoint, ""
	}
	if apiEndpoint != "" && (len(apiEndpoint) > 253 || !apiEndpointPattern.MatchString(apiEndpoint)) {
		if field == "" {
			return nil, fmt.Errorf("configured API endpoint %q is not usable in a kubeconfig", apiEndpoint)
		}
		return nil, errs.InvalidField(field, "must be a host:port or URL of the gpuplane API (letters, digits and .-_:/[]%%)")
	}
	var ca []byte
	if s.kubeconfigs != nil {
		if ca, err = s.kubeconfigs.VirtualClusterCA(ctx, v.ID); err != nil {
			s.log.WarnContext(ctx, "virtual cluster CA not available", "virtual_cluster", v.ID, "error", err)
			return nil, errs.Wrap(err, errs.KindFailedPrecondition, ReasonKubeconfigUnavailable,
				"the CA of %s is not known yet; try again shortly", req.GetName()).With("resource", req.GetName())
		}
	}
	args := []string{"credential"}
	if apiEndpoint != "" {
		args = append(args, "--server", apiEndpoint)
	}
	entry := kubeconfigEntryName(v.ID, false)
	cluster := map[string]any{"server": v.Endpoint}
	if len(ca) > 0 {
		cluster["certificate-authority-data"] = base64.StdEncoding.EncodeToString(ca)
	}
	user := map[string]any{"exec": map[string]any{
		"apiVersion":         ExecPluginAPIVersion,
		"command":            ExecPluginCommand,
		"args":               args,
		"interactiveMode":    "IfAvailable",
		"provideClusterInfo": false,
		"installHint":        execInstallHint,
	}}
	doc, err := renderKubeconfig(entry, cluster, user)
	if err != nil {
		return nil, err
	}
	return &pb.VirtualClusterKubeconfig{
		Kubeconfig: doc, Server: v.Endpoint, CertificateAuthorityData: ca, Context: entry,
	}, nil
}

// breakGlassKubeconfig returns the vCluster's admin kubeconfig, renamed so
// it cannot be mistaken for (or merged over) the everyday one, and records
// the hand-out. The audit event is written before the answer leaves: if it
// cannot be written, the caller gets an error and no credential.
func (s *VirtualClusters) breakGlassKubeconfig(ctx context.Context, a *identity.Access, team tenancy.Team, v virtualcluster.VirtualCluster) (*pb.VirtualClusterKubeconfig, error) {
	name := v.Name()
	if s.kubeconfigs == nil {
		return nil, errs.FailedPrecondition(ReasonKubeconfigUnavailable,
			"break-glass kubeconfigs need a host cluster, and this server has none").With("resource", name)
	}
	raw, err := s.kubeconfigs.AdminKubeconfig(ctx, v.ID)
	if err != nil {
		s.log.WarnContext(ctx, "virtual cluster admin kubeconfig not available", "virtual_cluster", v.ID, "error", err)
		return nil, errs.Wrap(err, errs.KindFailedPrecondition, ReasonKubeconfigUnavailable,
			"the admin kubeconfig of %s is not available yet; try again shortly", name).With("resource", name)
	}
	cluster, user, err := adminCredentials(raw)
	if err != nil {
		s.log.ErrorContext(ctx, "virtual cluster admin kubeconfig unusable", "virtual_cluster", v.ID, "error", err)
		return nil, errs.Wrap(err, errs.KindFailedPrecondition, ReasonKubeconfigUnavailable,
			"the admin kubeconfig of %s is not usable", name).With("resource", name)
	}
	cluster["server"] = v.Endpoint
	var ca []byte
	if data, ok := cluster["certificate-authority-data"].(string); ok {
		ca, _ = base64.StdEncoding.DecodeString(data)
	}
	entry := kubeconfigEntryName(v.ID, true)
	doc, err := renderKubeconfig(entry, cluster, user)
	if err != nil {
		return nil, err
	}
	after := map[string]any{"break_glass": true, "server": v.Endpoint, "context": entry, "phase": string(v.Phase)}
	if err := s.db.InTx(ctx, store.TxOptions{}, func(ctx context.Context, tx *store.Tx) error {
		return audit.Record(ctx, tx, audit.Event{
			Actor: a.Principal, Action: ActionBreakGlassKubeconfig, Resource: name,
			Department: team.Department, Team: team.ID, After: after,
		})
	}); err != nil {
		return nil, store.Classify(err)
	}
	s.log.WarnContext(ctx, "break-glass kubeconfig handed out", "virtual_cluster", name, "actor", a.Principal.Subject)
	return &pb.VirtualClusterKubeconfig{
		Kubeconfig: doc, Server: v.Endpoint, CertificateAuthorityData: ca, Context: entry, BreakGlass: true,
	}, nil
}

// kubeconfigEntryName names the cluster, user and context of a virtual
// cluster's kubeconfig. Virtual-cluster ids are unique platform-wide, so
// merging kubeconfigs of several never collides.
func kubeconfigEntryName(vcID string, breakGlass bool) string {
	if breakGlass {
		return "gpuplane-" + vcID + "-break-glass"
	}
	return "gpuplane-" + vcID
}

type kubeconfigFile struct {
	APIVersion     string              `json:"apiVersion"`
	Kind           string              `json:"kind"`
	Clusters       []kubeconfigCluster `json:"clusters"`
	Users          []kubeconfigUser    `json:"users"`
	Contexts       []kubeconfigContext `json:"contexts"`
	CurrentContext string              `json:"current-context"`
	Preferences    map[string]any      `json:"preferences"`
}

type kubeconfigCluster struct {
	Name    string         `json:"name"`
	Cluster map[string]any `json:"cluster"`
}

type kubeconfigUser struct {
	Name string         `json:"name"`
	User map[string]any `json:"user"`
}

type kubeconfigContext struct {
	Name    string     `json:"name"`
	Context contextRef `json:"context"`
}

type contextRef struct {
	Cluster   string `json:"cluster"`
	User      string `json:"user"`
	Namespace string `json:"namespace,omitempty"`
}

// renderKubeconfig writes a one-cluster kubeconfig whose cluster, user and
// context are all called name.
func renderKubeconfig(name string, cluster, user map[string]any) (string, error) {
	out, err := yaml.Marshal(kubeconfigFile{
		APIVersion: "v1", Kind: "Config",
		Clusters:       []kubeconfigCluster{{Name: name, Cluster: cluster}},
		Users:          []kubeconfigUser{{Name: name, User: user}},
		Contexts:       []kubeconfigContext{{Name: name, Context: contextRef{Cluster: name, User: name}}},
		CurrentContext: name,
		Preferences:    map[string]any{},
	})
	if err != nil {
		return "", fmt.Errorf("render kubeconfig: %w", err)
	}
	return string(out), nil
}

// adminCredentials picks the cluster and user of the admin kubeconfig's
// current context (or of its only context).
func adminCredentials(raw []byte) (cluster, user map[string]any, err error) {
	var f kubeconfigFile
	if err := yaml.Unmarshal(raw, &f); err != nil {
		return nil, nil, fmt.Errorf("parse admin kubeconfig: %w", err)
	}
	var ctx *contextRef
	for i := range f.Contexts {
		if f.Contexts[i].Name == f.CurrentContext || (f.CurrentContext == "" && len(f.Contexts) == 1) {
			ctx = &f.Contexts[i].Context
		}
	}
	if ctx == nil {
		return nil, nil, fmt.Errorf("admin kubeconfig has no current context %q", f.CurrentContext)
	}
	for _, c := range f.Clusters {
		if c.Name == ctx.Cluster {
			cluster = c.Cluster
		}
	}
	for _, u := range f.Users {
		if u.Name == ctx.User {
			user = u.User
		}
	}
	if cluster == nil || len(user) == 0 {
		return nil, nil, fmt.Errorf("admin kubeconfig context names cluster %q and user %q, which it does not define", ctx.Cluster, ctx.User)
	}
	if !hasCredential(user) {
		return nil, nil, fmt.Errorf("admin kubeconfig user %q has no client certificate or token", strings.TrimSpace(ctx.User))
	}
	return cluster, user, nil
}

func hasCredential(user map[string]any) bool {
	for _, k := range []string{"client-certificate-data", "token", "client-certificate"} {
		if s, ok := user[k].(string); ok && s != "" {
			return true
		}
	}
	return false
}
