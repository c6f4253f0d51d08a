package hostcluster

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestExposureValidate(t *testing.T) {
	for _, tc := range []struct {
		e    Exposure
		want string
	}{
		{Exposure{}, ""},
		{Exposure{Mode: ExposeLoadBalancer}, ""},
		{Exposure{Mode: ExposeLoadBalancer, Host: "{name}.lb.example.com"}, ""},
		{Exposure{Mode: ExposeNodePort, Host: "10.0.0.7"}, ""},
		{Exposure{Mode: ExposeIngress, Host: "{name}.vc.example.com"}, ""},
		{Exposure{Mode: "Route"}, `exposure mode "Route": must be one of ClusterIP, LoadBalancer, NodePort, Ingress`},
		{Exposure{Mode: ExposeIngress}, "exposure Ingress needs a host"},
		{Exposure{Mode: ExposeNodePort}, "exposure NodePort needs a host"},
		{Exposure{Mode: ExposeIngress, Host: "vc.example.com"}, "must contain {name} or {namespace}"},
		{Exposure{Mode: ExposeIngress, Host: "https://{name}.example.com"}, "neither a DNS name nor an IP address"},
	} {
		err := tc.e.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.e, err, tc.want)
		}
	}
}

func TestEndpointFromService(t *testing.T) {
	lb := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer,
		Ports: []corev1.ServicePort{{Name: "https", Port: 443, NodePort: 31443}}}}
	withAddr := func(ing corev1.LoadBalancerIngress) *corev1.Service {
		s := lb.DeepCopy()
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{ing}
		return s
	}
	np := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort,
		Ports: []corev1.ServicePort{{Name: "https", Port: 443, NodePort: 31443}, {Name: "kubelet", Port: 10250, NodePort: 31250}}}}
	clusterIP := &corev1.Service{Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP}}
	for _, tc := range []struct {
		e    Exposure
		svc  *corev1.Service
		want string
	}{
		{Exposure{}, clusterIP, "https://ml.vc-ml.svc"},
		{Exposure{Mode: ExposeLoadBalancer}, lb, ""}, // no address yet
		{Exposure{Mode: ExposeLoadBalancer}, withAddr(corev1.LoadBalancerIngress{IP: "203.0.113.9"}), "https://203.0.113.9"},
		{Exposure{Mode: ExposeLoadBalancer}, withAddr(corev1.LoadBalancerIngress{IP: "2001:db8::9"}), "https://[2001:db8::9]"},
		{Exposure{Mode: ExposeLoadBalancer}, withAddr(corev1.LoadBalancerIngress{Hostname: "a1.elb.example.com", IP: "203.0.113.9"}), "https://a1.elb.example.com"},
		{Exposure{Mode: ExposeLoadBalancer, Host: "{name}.lb.example.com"}, withAddr(corev1.LoadBalancerIngress{IP: "203.0.113.9"}), "https://ml.lb.example.com"},
		{Exposure{Mode: ExposeLoadBalancer}, clusterIP, ""}, // the release still has the old Service
		{Exposure{Mode: ExposeNodePort, Host: "nodes.example.com"}, np, "https://nodes.example.com:31443"},
		{Exposure{Mode: ExposeNodePort, Host: "nodes.example.com"}, clusterIP, ""},
		{Exposure{Mode: ExposeIngress, Host: "{name}.vc.example.com"}, clusterIP, "https://ml.vc.example.com"},
	} {
		if got := EndpointFromService(Settings{Exposure: tc.e}, "ml", tc.svc); got != tc.want {
			t.Errorf("%+v with %s Service: %q, want %q", tc.e, tc.svc.Spec.Type, got, tc.want)
		}
	}
}

// TestExposureOnTheRealAPIServer installs a virtual cluster in each
// exposure mode through Helm and reads the member endpoint back from what
// the API server holds: the chart's Service (its type and, for NodePort,
// the node port the API server allocated; for LoadBalancer the address a
// cloud controller would write, played here) and Ingress.
func TestExposureOnTheRealAPIServer(t *testing.T) {
	h := newHarness(t)
	for _, e := range testExposures() {
		t.Run(e.Mode, func(t *testing.T) {
			s := h.client.Settings()
			s.Exposure = e
			c, err := New(h.config, Options{Settings: s})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			name := h.n("expose-" + strings.ToLower(e.Mode))
			vc := testVC(name, "vision", "research", TierShared)
			ns := NamespaceName(name)
			if steps, err := c.Apply(h.ctx, vc); err != nil {
				t.Fatalf("apply: %v (%+v)", err, steps)
			}
			svc, err := h.kube.CoreV1().Services(ns).Get(h.ctx, ReleaseName(name), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			o, err := c.Observe(h.ctx, vc)
			if err != nil {
				t.Fatal(err)
			}
			policy, perr := h.kube.NetworkingV1().NetworkPolicies(ns).Get(h.ctx, APIAccessPolicyName, metav1.GetOptions{})
			var want string
			switch e.Mode {
			case ExposeLoadBalancer:
				if svc.Spec.Type != corev1.ServiceTypeLoadBalancer || svc.Annotations["service.beta.kubernetes.io/aws-load-balancer-type"] != "nlb" {
					t.Errorf("Service %s, annotations %v", svc.Spec.Type, svc.Annotations)
				}
				if o.Endpoint != "" || o.Ready() {
					t.Errorf("endpoint %q before the load balancer has an address", o.Endpoint)
				}
				svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "203.0.113.10"}}
				if _, err := h.kube.CoreV1().Services(ns).UpdateStatus(h.ctx, svc, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
				want = "https://203.0.113.10"
			case ExposeNodePort:
				if svc.Spec.Type != corev1.ServiceTypeNodePort {
					t.Errorf("Service type %s", svc.Spec.Type)
				}
				port := servicePort(svc, true)
				if port < 30000 {
					t.Fatalf("no node port allocated: %+v", svc.Spec.Ports)
				}
				want = httpsURL("nodes.gpu.example.com", port)
			case ExposeIngress:
				ing, err := h.kube.NetworkingV1().Ingresses(ns).Get(h.ctx, ReleaseName(name), metav1.GetOptions{})
				if err != nil {
					t.Fatalf("Ingress of the control plane: %v", err)
				}
				host := name + ".vc.example.com"
				if ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" || len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].Host != host {
					t.Errorf("Ingress class %v rules %+v, want host %s", ing.Spec.IngressClassName, ing.Spec.Rules, host)
				}
				if ing.Annotations["nginx.ingress.kubernetes.io/ssl-passthrough"] != "true" {
					t.Errorf("Ingress without TLS passthrough: %v", ing.Annotations)
				}
				if !apierrors.IsNotFound(perr) {
					t.Errorf("API access policy with an Ingress (traffic comes from the controller's namespace): %v", perr)
				}
				want = "https://" + host
			}
			// A real quota controller counts the control plane's own Service:
			// the quota must leave room for exactly its node ports.
			rq, err := h.kube.CoreV1().ResourceQuotas(ns).Get(h.ctx, "vc-"+name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			nodePorts := 0
			for _, p := range svc.Spec.Ports {
				if p.NodePort != 0 {
					nodePorts++
				}
			}
			if limit := rq.Spec.Hard[corev1.ResourceServicesNodePorts]; limit.Value() != int64(nodePorts) {
				t.Errorf("quota services.nodeports %s, the control plane Service takes %d", limit.String(), nodePorts)
			}
			if e.Mode != ExposeIngress {
				if perr != nil {
					t.Fatalf("API access policy: %v", perr)
				}
				checkAPIAccessPolicy(t, policy, name)
			}
			config := vclusterConfig(t, h, ns, name)
			if wantSAN := serverHost(want); !strings.Contains(config, "- "+wantSAN) && e.Mode != ExposeLoadBalancer {
				t.Errorf("control plane certificate SANs lack %s:\n%s", wantSAN, config)
			}
			if o, err = c.Observe(h.ctx, vc); err != nil {
				t.Fatal(err)
			}
			if o.Endpoint != want {
				t.Errorf("endpoint %q, want %q", o.Endpoint, want)
			}
		})
	}
}

func checkAPIAccessPolicy(t *testing.T, p *networkingv1.NetworkPolicy, release string) {
	t.Helper()
	if p.Spec.PodSelector.MatchLabels["release"] != release || p.Spec.PodSelector.MatchLabels["app"] != "vcluster" {
		t.Errorf("API access policy selects %v, want the control plane pod only", p.Spec.PodSelector.MatchLabels)
	}
	if len(p.Spec.Ingress) != 1 || len(p.Spec.Ingress[0].Ports) != 1 || p.Spec.Ingress[0].Ports[0].Port.IntValue() != controlPlanePort {
		t.Errorf("API access policy admits %+v, want port %d only", p.Spec.Ingress, controlPlanePort)
	}
}
