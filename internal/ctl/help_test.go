package ctl

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// TestHelpOfEveryCommand walks the whole command tree, hidden commands
// included: -h and --help exit 0 and print the command's usage, and never
// reach a server (none is configured).
func TestHelpOfEveryCommand(t *testing.T) {
	var paths [][]string
	var walk func(cmd *cobra.Command, path []string)
	walk = func(cmd *cobra.Command, path []string) {
		paths = append(paths, path)
		for _, sub := range cmd.Commands() {
			walk(sub, append(append([]string(nil), path...), sub.Name()))
		}
	}
	walk((&cli{}).newRoot(), nil)
	if len(paths) < 10 {
		t.Fatalf("only %d commands found", len(paths))
	}
	for _, path := range paths {
		for _, flag := range []string{"-h", "--help"} {
			args := append(append([]string(nil), path...), flag)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				var stdout, stderr bytes.Buffer
				code := Run(ctx, args, Options{
					Stdout: &stdout, Stderr: &stderr, Stdin: strings.NewReader(""),
					Getenv: func(string) string { return "" },
					OpenBrowser: func(string) error {
						t.Error("help opened a browser")
						return nil
					},
				})
				if code != ExitOK {
					t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr.String())
				}
				out := stdout.String()
				if !strings.Contains(out, "Usage:") || !strings.Contains(out, "gpuplanectl") {
					t.Errorf("no usage on stdout:\n%s\nstderr:\n%s", out, stderr.String())
				}
				if len(path) > 0 && !strings.Contains(out, path[len(path)-1]) {
					t.Errorf("usage does not name %q:\n%s", path[len(path)-1], out)
				}
			})
		}
	}
}
