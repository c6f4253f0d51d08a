package hostcluster

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Exposure modes of the virtual API servers.
const (
	// ExposeClusterIP keeps each virtual API server inside the host cluster
	// (its Service https://<name>.vc-<name>.svc); members need a route into
	// the cluster network. The default.
	ExposeClusterIP = "ClusterIP"
	// ExposeLoadBalancer gives each control plane Service its own load
	// balancer; members get its observed address (or Exposure.Host).
	ExposeLoadBalancer = "LoadBalancer"
	// ExposeNodePort opens a node port per control plane; members get
	// https://<Exposure.Host>:<node port>.
	ExposeNodePort = "NodePort"
	// ExposeIngress routes https://<Exposure.Host> through an ingress
	// controller with TLS passthrough: the virtual API server terminates TLS
	// itself, so client certificates and its own CA keep working.
	ExposeIngress = "Ingress"
)

// ExposeModes lists the exposure modes.
var ExposeModes = []string{ExposeClusterIP, ExposeLoadBalancer, ExposeNodePort, ExposeIngress}

// Exposure says how members reach the virtual API servers from outside the
// host cluster.
type Exposure struct {
	// Mode is one of ExposeModes. Default ExposeClusterIP.
	Mode string
	// Host, with "{name}" and "{namespace}" replaced:
	//   - Ingress (required): the host of each virtual API server, e.g.
	//     "{name}.vc.example.com" (a wildcard DNS record pointing at the
	//     ingress controller);
	//   - NodePort (required): a name or address that reaches the nodes'
	//     node ports (DNS round robin or a layer-4 balancer over the nodes);
	//   - LoadBalancer (optional): a DNS name pointing at each load
	//     balancer; without it members get the observed address.
	// It is added to the control plane certificate (controlPlane.proxy.extraSANs).
	Host string
	// IngressClassName of the Ingress; empty: the cluster's default class.
	IngressClassName string
	// Annotations on the control plane Service (LoadBalancer, NodePort) or
	// Ingress, e.g. a cloud load balancer's options or the ingress
	// controller's TLS passthrough switch. Empty for Ingress: the chart's
	// defaults (ingress-nginx: ssl-passthrough, backend-protocol HTTPS).
	Annotations map[string]string
}

// Validate checks the exposure settings.
func (e Exposure) Validate() error {
	mode := e.Mode
	if mode == "" {
		mode = ExposeClusterIP
	}
	switch mode {
	case ExposeClusterIP, ExposeLoadBalancer:
	case ExposeNodePort, ExposeIngress:
		if strings.TrimSpace(e.Host) == "" {
			return fmt.Errorf("hostcluster: exposure %s needs a host (e.g. %q)", mode, map[string]string{
				ExposeNodePort: "nodes.gpu.example.com", ExposeIngress: "{name}.vc.example.com"}[mode])
		}
	default:
		return fmt.Errorf("hostcluster: exposure mode %q: must be one of %s", e.Mode, strings.Join(ExposeModes, ", "))
	}
	if e.Host != "" {
		// Checked with a sample name: the result must be a DNS name or an IP.
		h := strings.NewReplacer("{name}", "x", "{namespace}", "vc-x").Replace(e.Host)
		if net.ParseIP(h) == nil && len(validation.IsDNS1123Subdomain(h)) > 0 {
			return fmt.Errorf("hostcluster: exposure host %q is neither a DNS name nor an IP address (only {name} and {namespace} are replaced)", e.Host)
		}
		if mode == ExposeIngress && !strings.Contains(e.Host, "{name}") && !strings.Contains(e.Host, "{namespace}") {
			return fmt.Errorf("hostcluster: exposure host %q must contain {name} or {namespace}: each virtual cluster needs its own Ingress host", e.Host)
		}
	}
	return nil
}

// exposureHost is Exposure.Host for one virtual cluster ("" when unset).
func (s Settings) exposureHost(vcName string) string {
	if s.Exposure.Host == "" {
		return ""
	}
	return strings.NewReplacer("{name}", ReleaseName(vcName), "{namespace}", NamespaceName(vcName)).Replace(s.Exposure.Host)
}

// The control plane Service's ports: https always; the fake kubelet port
// too unless it is a LoadBalancer (the chart's service.yaml, with the
// default networking.advanced.proxyKubelets.byHostname).
const (
	controlPlanePort      = 8443
	controlPlaneNodePorts = 2
)

// APIAccessPolicyName is the NetworkPolicy admitting members to the virtual
// API server from outside the cluster (LoadBalancer, NodePort).
const APIAccessPolicyName = "gpuplane-vcluster-api"

// exposureValues renders Settings.Exposure into controlPlane (service,
// ingress) and the resource quota, and returns host manifests it needs.
//
// The namespace's ResourceQuota counts the control plane's own Service, so
// it allows exactly what that Service takes (the chart's default allows no
// node port at all, which a LoadBalancer or NodePort Service needs) and
// tenants' synced Services get none beyond it. External clients reach the
// control plane pod directly with LoadBalancer and NodePort, which the
// tenant NetworkPolicy (same namespace and IngressNamespaces only) would
// drop, so a second policy admits the API port, and only that, from
// anywhere. Through an Ingress the traffic comes from the ingress
// controller, whose namespace belongs in IngressNamespaces.
func exposureValues(vc VirtualCluster, s Settings, controlPlane, quota map[string]any) []any {
	e := s.Exposure
	annotations := map[string]any{}
	for k, v := range e.Annotations {
		annotations[k] = v
	}
	switch e.Mode {
	case ExposeLoadBalancer, ExposeNodePort:
		svc := map[string]any{"spec": map[string]any{"type": e.Mode}}
		if len(annotations) > 0 {
			svc["annotations"] = annotations
		}
		controlPlane["service"] = svc
		if e.Mode == ExposeLoadBalancer {
			quota["services.loadbalancers"] = "1"
			quota["services.nodeports"] = "1"
		} else {
			quota["services.nodeports"] = strconv.Itoa(controlPlaneNodePorts)
		}
		return []any{renderAPIAccessPolicy(vc)}
	case ExposeIngress:
		ing := map[string]any{"enabled": true, "host": s.exposureHost(vc.Name)}
		if e.IngressClassName != "" {
			ing["spec"] = map[string]any{"ingressClassName": e.IngressClassName}
		}
		if len(annotations) > 0 {
			ing["annotations"] = annotations
		}
		controlPlane["ingress"] = ing
	}
	return nil
}

// renderAPIAccessPolicy admits the control plane port of the release's
// control plane pods from any address.
func renderAPIAccessPolicy(vc VirtualCluster) *networkingv1.NetworkPolicy {
	tcp := corev1.ProtocolTCP
	port := intstr.FromInt32(controlPlanePort)
	return &networkingv1.NetworkPolicy{
		TypeMeta: metav1.TypeMeta{APIVersion: networkingv1.SchemeGroupVersion.String(), Kind: "NetworkPolicy"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      APIAccessPolicyName,
			Namespace: NamespaceName(vc.Name),
			Labels:    commonLabels(vc),
		},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "vcluster", "release": ReleaseName(vc.Name)}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress: []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: &port}},
				From: []networkingv1.NetworkPolicyPeer{
					{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "::/0"}},
				},
			}},
		},
	}
}

// observeEndpoint is the member-facing address of the virtual API server,
// read from what the host cluster reports for the control plane Service:
// "" while it is not known yet (no Service, or no load balancer address).
func (c *Client) observeEndpoint(ctx context.Context, vc VirtualCluster) (string, error) {
	svc, ok, err := c.cachedService(ctx, vc.Name)
	if err != nil || !ok {
		return "", err
	}
	return EndpointFromService(c.settings, vc.Name, svc), nil
}

// EndpointFromService derives the member-facing API server URL of a
// virtual cluster from its control plane Service as observed on the host.
func EndpointFromService(s Settings, vcName string, svc *corev1.Service) string {
	s = s.withDefaults()
	host := s.exposureHost(vcName)
	switch s.Exposure.Mode {
	case ExposeLoadBalancer:
		if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
			return "" // the release has not been upgraded to this exposure yet
		}
		if host == "" {
			for _, ing := range svc.Status.LoadBalancer.Ingress {
				if ing.Hostname != "" {
					host = ing.Hostname
					break
				}
				if ing.IP != "" {
					host = ing.IP
					break
				}
			}
		}
		if host == "" {
			return "" // no address assigned yet
		}
		return httpsURL(host, servicePort(svc, false))
	case ExposeNodePort:
		if svc.Spec.Type != corev1.ServiceTypeNodePort {
			return ""
		}
		port := servicePort(svc, true)
		if port == 0 {
			return ""
		}
		return httpsURL(host, port)
	case ExposeIngress:
		return httpsURL(host, 443)
	default:
		return s.kubeconfigServer(vcName)
	}
}

// servicePort is the https port of the control plane Service (or its node
// port).
func servicePort(svc *corev1.Service, nodePort bool) int32 {
	for _, p := range svc.Spec.Ports {
		if p.Name == "https" || len(svc.Spec.Ports) == 1 {
			if nodePort {
				return p.NodePort
			}
			return p.Port
		}
	}
	return 0
}

func httpsURL(host string, port int32) string {
	if port == 443 || port == 0 {
		if strings.Contains(host, ":") { // an IPv6 address
			return "https://[" + host + "]"
		}
		return "https://" + host
	}
	return "https://" + net.JoinHostPort(host, strconv.Itoa(int(port)))
}
