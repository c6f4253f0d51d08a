package envtestenv_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/gpuplane/gpuplane/internal/envtestenv"
)

func TestMissingAssetsNamesTheFix(t *testing.T) {
	_, err := envtestenv.Start(context.Background(), envtestenv.Options{AssetsDir: t.TempDir()})
	if !errors.Is(err, envtestenv.ErrAssetsMissing) {
		t.Fatalf("want ErrAssetsMissing, got %v", err)
	}
	for _, want := range []string{"hack/envtest-assets.sh", "make envtest", "kube-apiserver"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestStartServesQueuesAndAdmissionPolicies(t *testing.T) {
	envtestenv.SkipIfShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	env, err := envtestenv.Start(ctx, envtestenv.Options{Logf: t.Logf})
	if err != nil {
		t.Fatal(err) // never skip: a machine without the binaries must not pass
	}
	t.Cleanup(func() { _ = env.Stop() })

	kube, err := kubernetes.NewForConfig(env.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	version, err := kube.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	// hack/envtest-assets.sh builds without the -X gitVersion ldflag, so
	// gitVersion is a placeholder; major/minor (what Helm's capabilities and
	// feature defaults use) come from the compiled-in binary version.
	wantMinor := strings.Split(envtestenv.KubernetesVersion, ".")[1]
	if version.Major != "1" || version.Minor != wantMinor {
		t.Errorf("server version %s.%s (%s), want 1.%s", version.Major, version.Minor, version.GitVersion, wantMinor)
	}
	has := func(gv, resource string) bool {
		list, err := kube.Discovery().ServerResourcesForGroupVersion(gv)
		if err != nil {
			return false
		}
		return slices.ContainsFunc(list.APIResources, func(r metav1.APIResource) bool { return r.Name == resource })
	}
	for _, c := range []struct{ gv, resource string }{
		{"scheduling.run.ai/v2", "queues"},
		{"admissionregistration.k8s.io/v1", "validatingadmissionpolicies"},
		{"admissionregistration.k8s.io/v1", "mutatingadmissionpolicies"},
	} {
		if !has(c.gv, c.resource) {
			t.Errorf("%s %s not served", c.gv, c.resource)
		}
	}

	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := env.WriteKubeconfig(path); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("kubeconfig: %v %v", st, err)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	fromFile, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fromFile.CoreV1().Namespaces().Get(ctx, "default", metav1.GetOptions{}); err != nil {
		t.Fatalf("kubeconfig file does not work: %v", err)
	}
}

func TestCRDDirHoldsQueueCRD(t *testing.T) {
	dir, err := envtestenv.CRDDir()
	if err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "scheduling.run.ai_queues.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), "name: queues.scheduling.run.ai") {
		t.Fatal("CRD fixture content unexpected")
	}
}
