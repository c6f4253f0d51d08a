package hostcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"slices"
	"strings"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// KAIOperatorLabel selects KAI Scheduler's operator Deployment: its chart
// labels it app=kai-operator and tags its image, like every KAI component,
// with the release's version.
const KAIOperatorLabel = "app=kai-operator"

// Probe is what can be observed of a host cluster from outside the
// virtual clusters it hosts.
type Probe struct {
	// KubernetesVersion is the API server's version (/version).
	KubernetesVersion string
	// KAIQueueAPI: scheduling.run.ai/v2 Queue is served, i.e. KAI
	// Scheduler's CRDs are installed.
	KAIQueueAPI bool
	// KAIVersion is the image tag of KAI's operator Deployment (label
	// app=kai-operator, any namespace); "" when there is none (KAI
	// installed some other way). The Queue CRD carries no version.
	KAIVersion string
	// Pools are the node pools (Settings.PoolLabel, unlabelled nodes in
	// DefaultPool) with their allocatable resources and nodes.
	Pools []PoolCapacity
}

// PoolCapacity is one node pool's allocatable resources.
type PoolCapacity struct {
	Name     string
	Nodes    []string // names, sorted
	Capacity Quantities
	// Tainted: every node carries the pool's NoSchedule taint.
	Tainted bool
}

// Probe observes the host cluster: version, KAI and capacity per pool.
// Any error means the cluster could not be read (Unreachable tells a
// network failure from a refusal).
func (c *Client) Probe(ctx context.Context) (Probe, error) {
	var p Probe
	// Discovery without the cache: the version and the APIs served are
	// what the probe is for.
	disco := c.kube.Discovery()
	rest := disco.RESTClient()
	if rest == nil {
		return p, errors.New("hostcluster: no discovery client")
	}
	var info struct {
		GitVersion string `json:"gitVersion"`
	}
	raw, err := rest.Get().AbsPath("/version").Do(ctx).Raw()
	if err != nil {
		return p, fmt.Errorf("hostcluster: read /version: %w", err)
	}
	if err := json.Unmarshal(raw, &info); err != nil {
		return p, fmt.Errorf("hostcluster: read /version: %w", err)
	}
	p.KubernetesVersion = info.GitVersion
	c.restartCachesIfCutOff()
	res, err := disco.ServerResourcesForGroupVersion(QueueGVR.GroupVersion().String())
	switch {
	case err == nil:
		p.KAIQueueAPI = slices.ContainsFunc(res.APIResources, func(r metav1.APIResource) bool { return r.Name == QueueGVR.Resource })
	case apierrors.IsNotFound(err):
	default:
		return p, fmt.Errorf("hostcluster: discover %s: %w", QueueGVR.GroupVersion(), err)
	}
	deps, err := c.kube.AppsV1().Deployments("").List(ctx, metav1.ListOptions{LabelSelector: KAIOperatorLabel, Limit: 5})
	if err != nil {
		return p, fmt.Errorf("hostcluster: find KAI's operator: %w", err)
	}
	for _, d := range deps.Items {
		for _, ctr := range d.Spec.Template.Spec.Containers {
			if tag := imageTag(ctr.Image); tag != "" {
				p.KAIVersion = tag
				break
			}
		}
		if p.KAIVersion != "" {
			break
		}
	}
	pools, err := c.pools(ctx)
	if err != nil {
		return p, err
	}
	p.Pools = pools
	return p, nil
}

// imageTag is the tag of an image reference ("" without one).
func imageTag(image string) string {
	image, _, _ = strings.Cut(image, "@")
	slash := strings.LastIndex(image, "/")
	if i := strings.LastIndex(image, ":"); i > slash {
		return image[i+1:]
	}
	return ""
}

// pools reads every node once and groups them by pool.
func (c *Client) pools(ctx context.Context) ([]PoolCapacity, error) {
	byName := map[string]*PoolCapacity{}
	var order []string
	err := c.eachNode(ctx, func(n *corev1.Node) {
		pool := n.Labels[c.settings.PoolLabel]
		if pool == "" {
			pool = DefaultPool
		}
		pc := byName[pool]
		if pc == nil {
			pc = &PoolCapacity{Name: pool, Tainted: true}
			byName[pool] = pc
			order = append(order, pool)
		}
		a := n.Status.Allocatable
		if gpu, ok := a[corev1.ResourceName(NvidiaGPUResource)]; ok {
			pc.Capacity.GPUCenti += gpu.Value() * 100
		}
		pc.Capacity.CPUMillis += a.Cpu().MilliValue()
		pc.Capacity.MemoryBytes += a.Memory().Value()
		pc.Nodes = append(pc.Nodes, n.Name)
		pc.Tainted = pc.Tainted && slices.ContainsFunc(n.Spec.Taints, func(t corev1.Taint) bool {
			return t.Key == c.settings.PoolLabel && t.Value == pool && t.Effect == corev1.TaintEffectNoSchedule
		})
	})
	if err != nil {
		return nil, err
	}
	slices.Sort(order)
	out := make([]PoolCapacity, 0, len(order))
	for _, name := range order {
		pc := byName[name]
		slices.Sort(pc.Nodes)
		out = append(out, *pc)
	}
	return out, nil
}

// eachNode lists the nodes page by page.
func (c *Client) eachNode(ctx context.Context, f func(n *corev1.Node)) error {
	opts := metav1.ListOptions{Limit: 500}
	for {
		nodes, err := c.kube.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			return fmt.Errorf("hostcluster: list nodes: %w", err)
		}
		for i := range nodes.Items {
			f(&nodes.Items[i])
		}
		if nodes.Continue == "" {
			return nil
		}
		opts.Continue = nodes.Continue
	}
}

// Unreachable reports an error that says the API server could not be
// reached or answered (refused or reset connections, timeouts, DNS, TLS
// handshakes that never finish, 503 and gateway errors), as opposed to an
// answer that refused the request. A host cluster failing this way is down
// for every virtual cluster on it, not broken for one.
func Unreachable(err error) bool {
	if err == nil {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, net.ErrClosed) {
		return true
	}
	var netErr net.Error
	if errors.As(err, &netErr) {
		return true
	}
	var urlErr *url.Error
	if errors.As(err, &urlErr) {
		return true
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) {
		return true
	}
	if apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) {
		return true
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		switch status.Status().Code {
		case 502, 503, 504:
			return true
		}
	}
	return false
}
