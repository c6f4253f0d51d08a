package devenv

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	pb "github.com/gpuplane/gpuplane/api/gpuplane/v1"
	"github.com/gpuplane/gpuplane/internal/hostcluster"
	"github.com/gpuplane/gpuplane/internal/names"
)

// FakeNode is a Node object with GPU capacity. The dev host cluster has no
// kubelets or GPUs, so nodes are written by hand: the worker reads capacity
// from them exactly as it would from a real cluster.
type FakeNode struct {
	Name string
	Pool string
	GPUs int64
	CPU  string
	Mem  string
}

// DemoNodes are the dev cluster's fake nodes: two with 8 GPUs each in the shared pool, and for every
// DEDICATED demo team one node with 8 GPUs in the team's own pool
// (dedicated-team-b), labelled and tainted as the platform expects.
var DemoNodes = demoNodes()

func demoNodes() []FakeNode {
	nodes := []FakeNode{
		{Name: "gpu-shared-1", Pool: names.SharedPool, GPUs: 8, CPU: "96", Mem: "768Gi"},
		{Name: "gpu-shared-2", Pool: names.SharedPool, GPUs: 8, CPU: "96", Mem: "768Gi"},
	}
	for _, t := range demoTeams {
		if t.tier == pb.IsolationTier_DEDICATED {
			nodes = append(nodes, FakeNode{Name: "gpu-" + t.id + "-1", Pool: names.DedicatedPool(t.id), GPUs: 8, CPU: "96", Mem: "768Gi"})
		}
	}
	return nodes
}

// CreateNodes writes the fake nodes with allocatable GPUs. Nodes outside
// the shared pool carry the pool's NoSchedule taint, which only the pool's
// own virtual clusters tolerate.
func CreateNodes(ctx context.Context, kube kubernetes.Interface, nodes []FakeNode) error {
	for _, n := range nodes {
		alloc := corev1.ResourceList{
			"nvidia.com/gpu":      *resource.NewQuantity(n.GPUs, resource.DecimalSI),
			corev1.ResourceCPU:    resource.MustParse(n.CPU),
			corev1.ResourceMemory: resource.MustParse(n.Mem),
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{
			hostcluster.DefaultPoolLabel: n.Pool, "nvidia.com/gpu.present": "true"}}}
		if n.Pool != names.SharedPool {
			node.Spec.Taints = []corev1.Taint{{Key: hostcluster.DefaultPoolLabel, Value: n.Pool, Effect: corev1.TaintEffectNoSchedule}}
		}
		created, err := kube.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("create node %s: %w", n.Name, err)
		}
		created.Status.Capacity, created.Status.Allocatable = alloc, alloc
		created.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
		if _, err := kube.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("node %s status: %w", n.Name, err)
		}
	}
	return nil
}

// SimulateControlPlanes stands in for the kubelet and vCluster itself on a
// host cluster that has neither: every vCluster StatefulSet is reported
// ready and the kubeconfig Secret vCluster would write is created, so a
// virtual cluster can reach READY in dev mode. Never used against a real
// cluster.
func SimulateControlPlanes(ctx context.Context, rc *rest.Config, every time.Duration, logf func(string, ...any)) {
	kube, err := kubernetes.NewForConfig(rc)
	if err != nil {
		logf("control-plane simulator: %v", err)
		return
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := simulateOnce(ctx, kube); err != nil && ctx.Err() == nil {
			logf("control-plane simulator: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

func simulateOnce(ctx context.Context, kube kubernetes.Interface) error {
	list, err := kube.AppsV1().StatefulSets("").List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for i := range list.Items {
		sts := &list.Items[i]
		if !strings.HasPrefix(sts.Namespace, "vc-") || sts.Name != strings.TrimPrefix(sts.Namespace, "vc-") {
			continue
		}
		if err := MarkControlPlaneReady(ctx, kube, sts); err != nil {
			return err
		}
	}
	return nil
}

// MarkControlPlaneReady reports sts ready and writes the kubeconfig Secret,
// with a simulated admin kubeconfig whose server nothing answers.
func MarkControlPlaneReady(ctx context.Context, kube kubernetes.Interface, sts *appsv1.StatefulSet) error {
	return MarkControlPlaneReadyWith(ctx, kube, sts, nil)
}

// MarkControlPlaneReadyWith reports sts ready and writes the kubeconfig
// Secret vCluster would write. With virtualKubeconfig (an admin kubeconfig
// of a real API server standing in for the virtual one, e.g. a second
// envtest), the Secret holds that one, so whatever gpuplane does inside the
// virtual cluster really happens; otherwise a self-signed stand-in.
func MarkControlPlaneReadyWith(ctx context.Context, kube kubernetes.Interface, sts *appsv1.StatefulSet, virtualKubeconfig []byte) error {
	replicas := int32(1)
	if sts.Spec.Replicas != nil {
		replicas = *sts.Spec.Replicas
	}
	// The StatefulSet controller's part too: scaled to zero (a sleeping
	// virtual cluster), no replica runs.
	if sts.Status.ReadyReplicas != replicas || sts.Status.Replicas != replicas {
		sts.Status.Replicas, sts.Status.ReadyReplicas, sts.Status.AvailableReplicas = replicas, replicas, replicas
		sts.Status.ObservedGeneration = sts.Generation
		if _, err := kube.AppsV1().StatefulSets(sts.Namespace).UpdateStatus(ctx, sts, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
			return err
		}
	}
	data, err := simulatedKubeconfigSecret(sts, virtualKubeconfig)
	if err != nil {
		return err
	}
	// Labelled as vCluster 0.36.1 (the default chart) labels it
	// (pkg/util/kubeconfig/kubeconfig.go); gpuplane's worker watches the
	// Secrets so labelled.
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: hostcluster.KubeconfigSecretName(sts.Name), Namespace: sts.Namespace,
			Labels: map[string]string{"app": "vcluster", "vcluster-name": sts.Name}},
		Data: data,
	}
	if _, err := kube.CoreV1().Secrets(sts.Namespace).Create(ctx, secret, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// simulatedKubeconfigSecret has the keys vCluster writes: config,
// certificate-authority, client-certificate, client-key.
func simulatedKubeconfigSecret(sts *appsv1.StatefulSet, virtualKubeconfig []byte) (map[string][]byte, error) {
	if len(virtualKubeconfig) > 0 {
		cfg, err := clientcmd.Load(virtualKubeconfig)
		if err != nil {
			return nil, fmt.Errorf("stand-in virtual kubeconfig: %w", err)
		}
		ctx := cfg.Contexts[cfg.CurrentContext]
		if ctx == nil || cfg.Clusters[ctx.Cluster] == nil || cfg.AuthInfos[ctx.AuthInfo] == nil {
			return nil, errors.New("stand-in virtual kubeconfig: its current context names no cluster or user")
		}
		return map[string][]byte{
			"config":                virtualKubeconfig,
			"certificate-authority": cfg.Clusters[ctx.Cluster].CertificateAuthorityData,
			"client-certificate":    cfg.AuthInfos[ctx.AuthInfo].ClientCertificateData,
			"client-key":            cfg.AuthInfos[ctx.AuthInfo].ClientKeyData,
		}, nil
	}
	certPEM, keyPEM, err := simulatedCert()
	if err != nil {
		return nil, err
	}
	server := fmt.Sprintf("https://%s.%s.svc", sts.Name, sts.Namespace)
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[sts.Name] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: certPEM}
	cfg.AuthInfos[sts.Name] = &clientcmdapi.AuthInfo{ClientCertificateData: certPEM, ClientKeyData: keyPEM}
	cfg.Contexts[sts.Name] = &clientcmdapi.Context{Cluster: sts.Name, AuthInfo: sts.Name}
	cfg.CurrentContext = sts.Name
	kubeconfig, err := clientcmd.Write(*cfg)
	if err != nil {
		return nil, err
	}
	return map[string][]byte{
		"config": kubeconfig, "certificate-authority": certPEM, "client-certificate": certPEM, "client-key": keyPEM,
	}, nil
}

// DevStateDir is where dev mode writes its kubeconfig.
func DevStateDir() string {
	dir, err := os.UserCacheDir()
	if err != nil {
		dir = os.TempDir()
	}
	return filepath.Join(dir, "gpuplane", "dev")
}

var (
	simOnce         sync.Once
	simCert, simKey []byte
	simErr          error
)

// simulatedCert is one self-signed certificate standing in for the CA and
// admin client certificate a real vCluster would generate.
func simulatedCert() ([]byte, []byte, error) {
	simOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			simErr = err
			return
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "gpuplane-dev-simulated-vcluster", Organization: []string{"system:masters"}},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(30 * 24 * time.Hour),
			IsCA: true, BasicConstraintsValid: true,
			KeyUsage:    x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			simErr = err
			return
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			simErr = err
			return
		}
		simCert = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		simKey = pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
	})
	return simCert, simKey, simErr
}
