// Package vclusterchart finds the vCluster charts that dev mode and tests
// install: the chart inside the github.com/loft-sh/vcluster Go module of
// each version, fetched through the Go module proxy into the module cache.
// Production never runs `go mod download`: it takes --vcluster-chart-dir
// (version=dir pairs) or --vcluster-chart-repo. This package imports only
// the standard library and the pure vclusterversions catalog, so
// hostcluster's own tests can use it without an import cycle.
package vclusterchart

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"

	"github.com/gpuplane/gpuplane/internal/vclusterversions"
)

// Default is the chart version dev mode and tests install unless they name
// another: the platform's default.
const Default = "0.36.1"

// Module is the Go module (path@version) whose source holds chart version.
func Module(version string) string {
	return "github.com/loft-sh/vcluster@v" + vclusterversions.Normalize(version)
}

var (
	dirMu    sync.Mutex
	dirCache = map[string]string{}
)

// Dir returns the chart of a vCluster version inside the Go module cache,
// downloading the module through the Go module proxy on first use (`go mod
// download -json`). The chart directory is read-only; Helm only reads it.
// Results are cached for the life of the process.
func Dir(ctx context.Context, version string) (string, error) {
	module := Module(version)
	dirMu.Lock()
	defer dirMu.Unlock()
	if dir := dirCache[module]; dir != "" {
		return dir, nil
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", module)
	// Outside any module, so the download never touches a go.mod.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GO111MODULE=on")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr == nil && info.Error != "" {
		return "", fmt.Errorf("vclusterchart: go mod download %s: %s", module, info.Error)
	}
	if err != nil {
		return "", fmt.Errorf("vclusterchart: go mod download %s: %w: %s", module, err, strings.TrimSpace(stderr.String()))
	}
	if info.Dir == "" {
		return "", fmt.Errorf("vclusterchart: go mod download %s printed no module directory", module)
	}
	dir := filepath.Join(info.Dir, "chart")
	if _, err := os.Stat(filepath.Join(dir, "Chart.yaml")); err != nil {
		return "", fmt.Errorf("vclusterchart: no chart in module %s: %w", module, err)
	}
	dirCache[module] = dir
	return dir, nil
}

// Dirs returns the chart directory of each of versions (all the charts
// gpuplane knows when none are named), keyed by normalized version: what
// hostcluster.ChartSource.Dirs takes.
func Dirs(ctx context.Context, versions ...string) (map[string]string, error) {
	if len(versions) == 0 {
		versions = vclusterversions.KnownCharts()
	}
	out := map[string]string{}
	for _, v := range versions {
		if v = vclusterversions.Normalize(v); v == "" {
			continue
		}
		dir, err := Dir(ctx, v)
		if err != nil {
			return nil, err
		}
		out[v] = dir
	}
	return out, nil
}

// Flag returns the value of --vcluster-chart-dir that installs each of
// versions (comma-separated, as --vcluster-chart-versions takes them) from
// the Go module cache: "0.36.1=/…/chart,0.20.0=/…/chart".
func Flag(ctx context.Context, versions string) (string, error) {
	var pairs []string
	for _, v := range strings.Split(versions, ",") {
		if v = vclusterversions.Normalize(v); v == "" {
			continue
		}
		dir, err := Dir(ctx, v)
		if err != nil {
			return "", err
		}
		pairs = append(pairs, v+"="+dir)
	}
	return strings.Join(pairs, ","), nil
}
