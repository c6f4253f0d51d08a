package main

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The test binary doubles as gpuplanectl, so the exit codes of the real
// process (main -> os.Exit) are checked without building anything.
func TestMain(m *testing.M) {
	if os.Getenv("GPUPLANECTL_TEST_AS_MAIN") == "1" {
		main()
		return
	}
	os.Exit(m.Run())
}

func runMain(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "GPUPLANECTL_TEST_AS_MAIN=1", "GPUPLANE_CONFIG="+filepath.Join(t.TempDir(), "config.yaml"),
		"GPUPLANE_SERVER=", "GPUPLANE_TOKEN=")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String(), errb.String()
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

func TestExitCodes(t *testing.T) {
	if code, out, _ := runMain(t, "version"); code != 0 || !strings.HasPrefix(out, "gpuplanectl ") {
		t.Errorf("version: %d %q", code, out)
	}
	if code, _, errOut := runMain(t, "get"); code != 2 || !strings.Contains(errOut, "name a kind") {
		t.Errorf("usage error: %d %q", code, errOut)
	}
	if code, _, errOut := runMain(t, "whoami", "--server", "127.0.0.1:1"); code != 1 || !strings.Contains(errOut, "not logged in") {
		t.Errorf("error: %d %q", code, errOut)
	}
}
