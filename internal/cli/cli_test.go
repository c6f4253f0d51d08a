package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// commandsInUsage lists the commands the top-level usage advertises, each
// as its words ("serve", "dev token"), so a command added to the usage is
// tested without touching this file.
func commandsInUsage(t *testing.T) [][]string {
	t.Helper()
	_, block, ok := strings.Cut(usage, "commands:\n")
	if !ok {
		t.Fatal("usage has no commands section")
	}
	var out [][]string
	for _, line := range strings.Split(block, "\n") {
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") {
			continue
		}
		synopsis, _, _ := strings.Cut(strings.TrimSpace(line), "  ")
		var words []string
		for _, w := range strings.Fields(synopsis) {
			if strings.Trim(w, "abcdefghijklmnopqrstuvwxyz") != "" {
				break
			}
			words = append(words, w)
		}
		if len(words) > 0 {
			out = append(out, words)
		}
	}
	return out
}

// TestHelpOfEveryCommand: -h and --help of every command exit 0 and print
// its usage and flags, without starting anything.
func TestHelpOfEveryCommand(t *testing.T) {
	cmds := commandsInUsage(t)
	if len(cmds) < 3 { // serve, worker, migrate
		t.Fatalf("found only %v in the usage", cmds)
	}
	cmds = append(cmds, nil) // gpuplane -h itself
	for _, words := range cmds {
		for _, flag := range []string{"-h", "--help"} {
			args := append(append([]string(nil), words...), flag)
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
				defer cancel()
				var stdout, stderr bytes.Buffer
				if code := Main(ctx, args, &stdout, &stderr); code != 0 {
					t.Fatalf("exit %d, want 0; stderr:\n%s", code, stderr.String())
				}
				out := stdout.String() + stderr.String()
				if !strings.Contains(out, "usage: gpuplane") {
					t.Errorf("no usage printed:\n%s", out)
				}
				if len(words) > 0 && !strings.Contains(out, "-log-level") {
					t.Errorf("flags not listed:\n%s", out)
				}
			})
		}
	}
}

func TestBadFlagIsUsageError(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := Main(t.Context(), []string{"serve", "--no-such-flag"}, &stdout, &stderr); code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), "no-such-flag") {
		t.Errorf("stderr does not name the bad flag:\n%s", stderr.String())
	}
}
