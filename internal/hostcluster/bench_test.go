package hostcluster

import (
	"fmt"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/kube"
)

// benchSeq keeps names unique across -count runs on the shared server.
var benchSeq atomic.Int64

// BenchmarkApply measures Apply of one new virtual cluster end to end
// (namespace, three queues, four admission objects, network policy, Helm
// install) against the envtest API server.
func BenchmarkApply(b *testing.B) {
	h := newHarness(b)
	if _, err := h.client.loadChart(h.ctx, newChart); err != nil { // as in a running worker
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		vc := testVC(fmt.Sprintf("bench-apply-%d", benchSeq.Add(1)), "bench", "bench", TierShared)
		if _, err := h.client.Apply(h.ctx, vc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkApplyUnchanged measures a resync: Apply of a virtual cluster
// that is already in the desired state (every step a no-op).
func BenchmarkApplyUnchanged(b *testing.B) {
	h := newHarness(b)
	vc := testVC("bench-noop", "bench", "bench", TierShared)
	if _, err := h.client.Apply(h.ctx, vc); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		if _, err := h.client.Apply(h.ctx, vc); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkHelmInstall is the baseline: a plain Helm SDK install of the same
// chart with the same values into an existing namespace, nothing else.
func BenchmarkHelmInstall(b *testing.B) {
	h := newHarness(b)
	lc, err := h.client.loadChart(h.ctx, newChart)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		vc := testVC(fmt.Sprintf("bench-helm-%d", benchSeq.Add(1)), "bench", "bench", TierShared)
		ns := NamespaceName(vc.Name)
		if _, err := h.kube.CoreV1().Namespaces().Create(h.ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		values, err := jsonRoundTrip(RenderVClusterValues(vc, h.client.settings))
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		cfg, err := h.client.helmConfig(ns)
		if err != nil {
			b.Fatal(err)
		}
		in := action.NewInstall(cfg)
		in.ReleaseName = ReleaseName(vc.Name)
		in.Namespace = ns
		in.WaitStrategy = kube.HookOnlyStrategy
		if _, err := in.RunWithContext(h.ctx, lc.chart, values); err != nil {
			b.Fatal(err)
		}
	}
}
