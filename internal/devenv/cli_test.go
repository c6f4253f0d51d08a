package devenv

import (
	"bytes"
	"strings"
	"testing"
)

// TestHelpExitsZero: -h and --help of gpuplane-dev and of its token
// subcommand print the usage and succeed; a bad flag is a usage error.
func TestHelpExitsZero(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}, {"token", "-h"}, {"token", "--help"}} {
		var out, errOut bytes.Buffer
		if code := Main(t.Context(), args, &out, &errOut); code != 0 {
			t.Errorf("gpuplane-dev %s: exit %d, want 0 (stderr %q)", strings.Join(args, " "), code, errOut.String())
		}
		if !strings.Contains(out.String()+errOut.String(), "usage") && !strings.Contains(errOut.String(), "-issuer-addr") {
			t.Errorf("gpuplane-dev %s printed no usage", strings.Join(args, " "))
		}
	}
	var out, errOut bytes.Buffer
	if code := Main(t.Context(), []string{"--no-such-flag"}, &out, &errOut); code != 2 {
		t.Errorf("bad flag: exit %d, want 2", code)
	}
}
