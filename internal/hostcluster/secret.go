package hostcluster

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
)

// Keys of the Secret vCluster writes its admin kubeconfig to.
const (
	KubeconfigSecretConfigKey = "config"
	KubeconfigSecretCAKey     = "certificate-authority"
)

// KubeconfigSecret reads the Secret vc-<name> in namespace vc-<name>, where
// vCluster publishes its admin kubeconfig ("config") and the API server's
// CA ("certificate-authority"). It holds admin credentials: callers must
// hand its content only to audited break-glass users.
func (c *Client) KubeconfigSecret(ctx context.Context, vcName string) (map[string][]byte, error) {
	s, err := c.kube.CoreV1().Secrets(NamespaceName(vcName)).Get(ctx, KubeconfigSecretName(vcName), metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("hostcluster: kubeconfig secret of %s: %w", vcName, err)
	}
	return s.Data, nil
}

// VirtualClusterCA is the PEM CA bundle of a virtual cluster's API server:
// the Secret's certificate-authority key or, when vCluster did not write
// one, the certificate-authority-data of the admin kubeconfig's cluster.
// It returns nil (and no error) when the Secret exists but names no CA.
func (c *Client) VirtualClusterCA(ctx context.Context, vcName string) ([]byte, error) {
	data, err := c.KubeconfigSecret(ctx, vcName)
	if err != nil {
		return nil, err
	}
	if ca := data[KubeconfigSecretCAKey]; len(ca) > 0 {
		return ca, nil
	}
	raw := data[KubeconfigSecretConfigKey]
	if len(raw) == 0 {
		return nil, nil
	}
	cfg, err := clientcmd.Load(raw)
	if err != nil {
		return nil, fmt.Errorf("hostcluster: kubeconfig secret of %s: %w", vcName, err)
	}
	clusterName := ""
	if ctx, ok := cfg.Contexts[cfg.CurrentContext]; ok {
		clusterName = ctx.Cluster
	} else if len(cfg.Clusters) == 1 {
		for name := range cfg.Clusters {
			clusterName = name
		}
	}
	if cl, ok := cfg.Clusters[clusterName]; ok && len(cl.CertificateAuthorityData) > 0 {
		return cl.CertificateAuthorityData, nil
	}
	return nil, nil
}

// AdminKubeconfig is the vCluster's own admin kubeconfig (break glass).
func (c *Client) AdminKubeconfig(ctx context.Context, vcName string) ([]byte, error) {
	data, err := c.KubeconfigSecret(ctx, vcName)
	if err != nil {
		return nil, err
	}
	raw := data[KubeconfigSecretConfigKey]
	if len(raw) == 0 {
		return nil, fmt.Errorf("hostcluster: kubeconfig secret of %s has no %q key", vcName, KubeconfigSecretConfigKey)
	}
	return raw, nil
}
