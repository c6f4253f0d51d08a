package hostcluster

import (
	"context"
	"encoding/base64"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestKubeconfigSecretAndCA(t *testing.T) {
	ctx := context.Background()
	caPEM := []byte("-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n")
	config := "apiVersion: v1\nkind: Config\nclusters:\n- name: vc\n  cluster:\n    server: https://ml-dev.vc-ml-dev.svc\n" +
		"    certificate-authority-data: " + base64.StdEncoding.EncodeToString([]byte("from-config")) + "\n" +
		"users:\n- name: admin\n  user:\n    client-certificate-data: Y2VydA==\n    client-key-data: a2V5\n" +
		"contexts:\n- name: vc\n  context:\n    cluster: vc\n    user: admin\ncurrent-context: vc\n"
	secret := func(name string, data map[string][]byte) *corev1.Secret {
		return &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: KubeconfigSecretName(name), Namespace: NamespaceName(name)}, Data: data}
	}
	c := &Client{kube: fake.NewClientset(
		secret("with-ca", map[string][]byte{"config": []byte(config), "certificate-authority": caPEM}),
		secret("config-only", map[string][]byte{"config": []byte(config)}),
		secret("empty", map[string][]byte{}),
	)}

	data, err := c.KubeconfigSecret(ctx, "with-ca")
	if err != nil || string(data["config"]) != config {
		t.Fatalf("KubeconfigSecret: %v %q", err, data["config"])
	}
	if ca, err := c.VirtualClusterCA(ctx, "with-ca"); err != nil || string(ca) != string(caPEM) {
		t.Errorf("CA from key: %q %v", ca, err)
	}
	if ca, err := c.VirtualClusterCA(ctx, "config-only"); err != nil || string(ca) != "from-config" {
		t.Errorf("CA from config: %q %v", ca, err)
	}
	if ca, err := c.VirtualClusterCA(ctx, "empty"); err != nil || ca != nil {
		t.Errorf("CA of a secret without one: %q %v", ca, err)
	}
	if _, err := c.VirtualClusterCA(ctx, "missing"); err == nil {
		t.Error("CA of a missing secret: no error")
	}
	if raw, err := c.AdminKubeconfig(ctx, "config-only"); err != nil || string(raw) != config {
		t.Errorf("AdminKubeconfig: %v", err)
	}
	if _, err := c.AdminKubeconfig(ctx, "empty"); err == nil {
		t.Error("AdminKubeconfig without config key: no error")
	}
}
