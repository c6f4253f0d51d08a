package hostcluster

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"sigs.k8s.io/yaml"
)

var updateProofValues = flag.Bool("update-proof-values", false, "rewrite test/vclusterproof/testdata from RenderVClusterValues")

// proofValuesDir holds the values the vCluster source proof
// (test/vclusterproof, a separate Go module that imports vCluster's syncer)
// configures the syncer with.
const proofValuesDir = "../../test/vclusterproof/testdata"

// TestProofValuesAreCurrent keeps the proof honest: it must run the syncer
// with exactly what gpuplane renders for the default chart. After a change
// to the values, run
//
//	go test ./internal/hostcluster -run TestProofValuesAreCurrent -update-proof-values
func TestProofValuesAreCurrent(t *testing.T) {
	shared := testVC("tenant", "team-a", "research", TierShared)
	shared.AllowFractionalGPUs = true
	for file, vc := range map[string]VirtualCluster{
		"values-shared.yaml":    shared,
		"values-dedicated.yaml": testVC("tenant", "team-b", "research", TierDedicated),
	} {
		if vc.ChartVersion != newChart {
			t.Fatalf("%s: the proof module imports vCluster %s", file, newChart)
		}
		rendered, err := jsonRoundTrip(RenderVClusterValues(vc, Settings{}))
		if err != nil {
			t.Fatal(err)
		}
		data, err := yaml.Marshal(rendered)
		if err != nil {
			t.Fatal(err)
		}
		data = append([]byte("# Rendered by gpuplane (internal/hostcluster TestProofValuesAreCurrent); do not edit.\n"), data...)
		path := filepath.Join(proofValuesDir, file)
		if *updateProofValues {
			if err := os.WriteFile(path, data, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		have, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update-proof-values)", err)
		}
		if !bytes.Equal(have, data) {
			t.Errorf("%s is stale: the vCluster proof would not run what gpuplane renders; run with -update-proof-values", path)
		}
	}
}
