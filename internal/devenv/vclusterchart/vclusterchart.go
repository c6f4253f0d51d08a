// Package vclusterchart finds the vCluster chart that dev mode and tests
// install: the chart inside the github.com/loft-sh/vcluster Go module,
// fetched through the Go module proxy into the module cache. Production
// never runs `go mod download`: it takes --vcluster-chart-dir or
// --vcluster-chart-repo. This package imports only the standard library, so
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
)

// Module is the Go module whose source holds the tested chart.
const Module = "github.com/loft-sh/vcluster@v0.20.0"

var (
	dirMu    sync.Mutex
	dirCache string
)

// Dir returns the vCluster 0.20.0 chart inside the Go module
// cache, downloading the module through the Go module proxy on first use
// (`go mod download -json`). The chart directory is read-only; Helm only
// reads it. The result is cached for the life of the process.
func Dir(ctx context.Context) (string, error) {
	dirMu.Lock()
	defer dirMu.Unlock()
	if dirCache != "" {
		return dirCache, nil
	}
	cmd := exec.CommandContext(ctx, "go", "mod", "download", "-json", Module)
	// Outside any module, so the download never touches a go.mod.
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off", "GO111MODULE=on")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var info struct{ Dir, Error string }
	if jerr := json.Unmarshal(out, &info); jerr == nil && info.Error != "" {
		return "", fmt.Errorf("vclusterchart: go mod download %s: %s", Module, info.Error)
	}
	if err != nil {
		return "", fmt.Errorf("vclusterchart: go mod download %s: %w: %s", Module, err, strings.TrimSpace(stderr.String()))
	}
	if info.Dir == "" {
		return "", fmt.Errorf("vclusterchart: go mod download %s printed no module directory", Module)
	}
	dir := filepath.Join(info.Dir, "chart")
	if _, err := os.Stat(filepath.Join(dir, "Chart.yaml")); err != nil {
		return "", fmt.Errorf("vclusterchart: no chart in module %s: %w", Module, err)
	}
	dirCache = dir
	return dir, nil
}
