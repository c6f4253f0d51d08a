package hostcluster

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// Target is a host cluster reached through a kubeconfig kept in a Secret
// of gpuplane's own namespace on the cluster gpuplane runs in.
type Target struct {
	ID                    string
	SecretName, SecretKey string
}

// KubeconfigError says a host cluster's kubeconfig Secret is missing or
// unusable: an admin must fix it; retrying does not help.
type KubeconfigError struct {
	Target Target
	Detail string
}

func (e *KubeconfigError) Error() string {
	return fmt.Sprintf("hostcluster: kubeconfig of host cluster %s (Secret %s, key %q): %s", e.Target.ID, e.Target.SecretName, e.Target.SecretKey, e.Detail)
}

// Registry keeps one Client per host cluster reached through a kubeconfig
// Secret, built from the Secret and rebuilt when its content changes. The
// Secrets are read from the home cluster (the one gpuplane runs in) at
// every lookup; when the home cluster cannot be read, the last client
// built keeps serving, so an outage of one cluster never takes the others
// along. Safe for concurrent use.
type Registry struct {
	home      kubernetes.Interface
	namespace string
	opts      Options
	tune      func(*rest.Config)

	mu      sync.Mutex
	clients map[string]registryEntry
}

type registryEntry struct {
	digest [32]byte
	client *Client
}

// NewRegistry reads kubeconfig Secrets in namespace through home; tune,
// when set, adjusts each host cluster's REST config (rate limits,
// timeouts) before its Client is built with opts.
func NewRegistry(home *rest.Config, namespace string, opts Options, tune func(*rest.Config)) (*Registry, error) {
	kube, err := kubernetes.NewForConfig(home)
	if err != nil {
		return nil, fmt.Errorf("hostcluster: registry: %w", err)
	}
	if err := opts.Settings.ValidateProfiles(); err != nil {
		return nil, err
	}
	return &Registry{home: kube, namespace: namespace, opts: opts, tune: tune, clients: map[string]registryEntry{}}, nil
}

// Namespace is where the kubeconfig Secrets are read.
func (r *Registry) Namespace() string { return r.namespace }

// Client returns the host cluster's Client, (re)built from its Secret.
func (r *Registry) Client(ctx context.Context, t Target) (*Client, error) {
	secret, err := r.home.CoreV1().Secrets(r.namespace).Get(ctx, t.SecretName, metav1.GetOptions{})
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, &KubeconfigError{Target: t, Detail: fmt.Sprintf("Secret %s/%s not found", r.namespace, t.SecretName)}
		}
		r.mu.Lock()
		e, ok := r.clients[t.ID]
		r.mu.Unlock()
		if ok {
			return e.client, nil // the home cluster is down; the host cluster may not be
		}
		return nil, fmt.Errorf("hostcluster: read kubeconfig Secret %s/%s of host cluster %s: %w", r.namespace, t.SecretName, t.ID, err)
	}
	raw, ok := secret.Data[t.SecretKey]
	if !ok || len(raw) == 0 {
		return nil, &KubeconfigError{Target: t, Detail: fmt.Sprintf("Secret %s/%s has no key %q", r.namespace, t.SecretName, t.SecretKey)}
	}
	digest := sha256.Sum256(append([]byte(t.SecretName+"\x00"+t.SecretKey+"\x00"), raw...))
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.clients[t.ID]; ok && e.digest == digest {
		return e.client, nil
	}
	rc, err := RESTConfigFromKubeconfig(raw)
	if err != nil {
		return nil, &KubeconfigError{Target: t, Detail: err.Error()}
	}
	if r.tune != nil {
		r.tune(rc)
	}
	c, err := New(rc, r.opts)
	if err != nil {
		return nil, err
	}
	if old, ok := r.clients[t.ID]; ok {
		// Its watches stop; a reconcile still holding it fails and is
		// retried with the new one.
		go old.client.Close()
	}
	r.clients[t.ID] = registryEntry{digest: digest, client: c}
	return c, nil
}

// Forget drops (and closes) the client of a host cluster (it was deleted).
func (r *Registry) Forget(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if e, ok := r.clients[id]; ok {
		go e.client.Close()
	}
	delete(r.clients, id)
}

// Close closes every client.
func (r *Registry) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for id, e := range r.clients {
		e.client.Close()
		delete(r.clients, id)
	}
}

// RESTConfigFromKubeconfig builds a REST config from a host cluster's
// kubeconfig, refusing what would make gpuplane run programs or read its
// own files: exec credential plugins, auth-provider plugins and paths to
// certificates, keys or token files. The credentials must be inline (a
// token, or a client certificate and key) with an inline CA.
func RESTConfigFromKubeconfig(raw []byte) (*rest.Config, error) {
	cfg, err := clientcmd.Load(raw)
	if err != nil {
		return nil, fmt.Errorf("not a kubeconfig: %w", err)
	}
	name := cfg.CurrentContext
	kctx, ok := cfg.Contexts[name]
	if !ok {
		if len(cfg.Contexts) != 1 {
			return nil, errors.New("the kubeconfig names no current context")
		}
		for n, c := range cfg.Contexts {
			name, kctx = n, c
		}
	}
	cluster, user := cfg.Clusters[kctx.Cluster], cfg.AuthInfos[kctx.AuthInfo]
	switch {
	case cluster == nil:
		return nil, fmt.Errorf("context %q names no cluster", name)
	case user == nil:
		return nil, fmt.Errorf("context %q names no user", name)
	case user.Exec != nil:
		return nil, errors.New("the user runs an exec credential plugin, which gpuplane does not run; use a token or a client certificate")
	case user.AuthProvider != nil:
		return nil, errors.New("the user uses an auth-provider plugin, which gpuplane does not run; use a token or a client certificate")
	case user.ClientCertificate != "" || user.ClientKey != "" || user.TokenFile != "" || cluster.CertificateAuthority != "":
		return nil, errors.New("the kubeconfig refers to files; embed certificates, keys and tokens (client-certificate-data, token, certificate-authority-data)")
	}
	cfg.CurrentContext = name
	return clientcmd.NewDefaultClientConfig(*cfg, &clientcmd.ConfigOverrides{}).ClientConfig()
}
