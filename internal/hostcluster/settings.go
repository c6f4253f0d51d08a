package hostcluster

import (
	"crypto/x509"
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Settings are platform-wide choices that shape every virtual cluster; they
// come from gpuplane's configuration, not from the tenant.
type Settings struct {
	// PoolLabel is the node label naming a node's pool. Default
	// DefaultPoolLabel.
	PoolLabel string
	// KAINodePoolLabel, when set, maps every node pool to a KAI node pool:
	// it must be KAI's node-pool label key (KAI's global.nodePoolLabelKey,
	// by default kai.scheduler/node-pool), with one SchedulingShard per pool
	// whose partitionLabelValue is the pool's name. Queues and KAI pods
	// then carry <label>=<pool> (see RenderQueues, RenderGuardrails). Empty:
	// one KAI scheduler sees every pool.
	KAINodePoolLabel string
	// TierProfiles parameterise the admission guardrails and Pod Security
	// level per isolation tier; tiers not listed get DefaultTierProfiles.
	TierProfiles map[string]TierProfile
	// IngressNamespaces may reach tenant pods, the virtual API server
	// included, besides the tenant's own namespace: the ingress controller
	// (Exposure ExposeIngress), gpuplane itself (its worker applies the
	// team's RBAC inside each virtual cluster), monitoring.
	IngressNamespaces []string
	// KubeconfigServer is the API server URL vCluster writes into its admin
	// kubeconfig Secret; "{name}" and "{namespace}" are replaced. It is the
	// address gpuplane's worker uses, so it must be reachable from inside
	// the host cluster. Default: the in-cluster Service,
	// https://{name}.{namespace}.svc. Members get the address of Exposure.
	KubeconfigServer string
	// Exposure says how members reach each virtual API server from outside
	// the host cluster; the member-facing endpoint comes from it.
	Exposure Exposure
	// ControlPlaneImageRegistry and ControlPlaneImageRepository override the
	// vCluster control plane image. Default "ghcr.io" and
	// "loft-sh/vcluster-oss": the chart defaults to the Pro image, which
	// gpuplane neither needs nor licenses. The tag is the chart version.
	ControlPlaneImageRegistry   string
	ControlPlaneImageRepository string
	// Chart is where the vCluster chart comes from.
	Chart ChartSource
	// OIDC, when IssuerURL is set, makes every virtual API server accept the
	// platform's ID tokens and binds the team's members inside the virtual
	// cluster (see RenderTenantRBAC). Empty: virtual clusters only know the
	// admin client certificate.
	OIDC OIDCSettings
}

// OIDCSettings configure the OIDC authenticator of the virtual API servers
// (kube-apiserver --oidc-* flags). They should describe the same issuer and
// client as gpuplane's own API, so that the token a tenant already has for
// gpuplane also works against the team's virtual clusters.
type OIDCSettings struct {
	// IssuerURL must be https: kube-apiserver refuses any other scheme.
	IssuerURL string
	// ClientID is the audience tokens must carry. Default "gpuplane".
	ClientID string
	// UsernameClaim is the claim used as the user name; it must be the claim
	// Member.Name holds for users. Default "email".
	UsernameClaim string
	// UsernamePrefix is put in front of every OIDC user name inside the
	// virtual cluster (and of user subjects in the RBAC gpuplane renders),
	// keeping OIDC users apart from service accounts and system users.
	// Empty means no prefix (rendered as "-", since kube-apiserver would
	// otherwise prefix non-email claims with "<issuer>#").
	UsernamePrefix string
	// GroupsClaim is the claim holding the user's groups. Default "groups".
	GroupsClaim string
	// GroupsPrefix is put in front of every OIDC group name (and of group
	// subjects in the rendered RBAC), so that a token cannot claim
	// "system:masters". Empty means no prefix.
	GroupsPrefix string
	// CACertPEM, when set, is the CA bundle the virtual API server trusts for
	// the issuer's TLS certificate (otherwise the system roots). It is
	// shipped in a ConfigMap in the host namespace and mounted into the
	// control plane pod.
	CACertPEM []byte
}

// Enabled reports whether virtual API servers get OIDC flags at all.
func (o OIDCSettings) Enabled() bool { return o.IssuerURL != "" }

// Validate checks what kube-apiserver itself would refuse at start-up,
// which in a virtual cluster means a control plane in a crash loop.
func (o OIDCSettings) Validate() error {
	if !o.Enabled() {
		return nil
	}
	u, err := url.Parse(o.IssuerURL)
	if err != nil {
		return fmt.Errorf("hostcluster: OIDC issuer URL %q: %w", o.IssuerURL, err)
	}
	if u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("hostcluster: OIDC issuer URL %q: kube-apiserver requires an https issuer", o.IssuerURL)
	}
	if len(o.CACertPEM) > 0 {
		if !x509.NewCertPool().AppendCertsFromPEM(o.CACertPEM) {
			return errors.New("hostcluster: OIDC CA bundle holds no PEM certificate")
		}
	}
	return nil
}

func (o OIDCSettings) withDefaults() OIDCSettings {
	if o.ClientID == "" {
		o.ClientID = "gpuplane"
	}
	if o.UsernameClaim == "" {
		o.UsernameClaim = "email"
	}
	if o.GroupsClaim == "" {
		o.GroupsClaim = "groups"
	}
	return o
}

const defaultKubeconfigServer = "https://{name}.{namespace}.svc"

func (s Settings) withDefaults() Settings {
	if s.PoolLabel == "" {
		s.PoolLabel = DefaultPoolLabel
	}
	if s.KubeconfigServer == "" {
		s.KubeconfigServer = defaultKubeconfigServer
	}
	if s.ControlPlaneImageRegistry == "" {
		s.ControlPlaneImageRegistry = "ghcr.io"
	}
	if s.ControlPlaneImageRepository == "" {
		s.ControlPlaneImageRepository = "loft-sh/vcluster-oss"
	}
	if s.Exposure.Mode == "" {
		s.Exposure.Mode = ExposeClusterIP
	}
	if s.OIDC.Enabled() {
		s.OIDC = s.OIDC.withDefaults()
	}
	return s
}

func (s Settings) kubeconfigServer(vcName string) string {
	return strings.NewReplacer("{name}", ReleaseName(vcName), "{namespace}", NamespaceName(vcName)).Replace(s.KubeconfigServer)
}

// serverHost is the host of a URL ("https://vc.example.com:6443") or of a
// bare host[:port]: what the control plane certificate must be valid for.
func serverHost(server string) string {
	if server == "" {
		return ""
	}
	if !strings.Contains(server, "://") {
		server = "https://" + server
	}
	u, err := url.Parse(server)
	if err != nil {
		return ""
	}
	return u.Hostname()
}
