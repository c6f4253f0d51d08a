package policy

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/gpuplane/gpuplane/internal/quota"
)

// fuzzInputs are what a policy may be evaluated on: empty, typical and
// extreme requests (largest quotas, long unicode text, shrinking).
func fuzzInputs() []Input {
	typical := input(0.25, "research")
	typical.Request.Kind = KindCreateVirtualCluster
	typical.Request.Justification = "training run for the Q3 paper"
	typical.Request.Expires = true

	var extreme Input
	extreme.Request.Kind = KindDeleteVirtualCluster
	extreme.Request.SetQuantities(quota.Resources{},
		quota.Resources{GPU: quota.MaxGPU, CPUMillis: quota.MaxCPUMillis, MemoryBytes: quota.MaxMemoryBytes})
	extreme.Request.Justification = strings.Repeat("é(.*)+✓\\", 512)
	extreme.Request.Requester = strings.Repeat("x", 1024) + "@example.com"
	extreme.Team = Team{Name: strings.Repeat("t", 63), IsolationTier: TierDedicated, GPUQuota: math.MaxInt32}
	extreme.Department = Department{Name: "d", GPUBudget: quota.MaxGPU.KAI()}
	return []Input{{}, typical, extreme}
}

// FuzzCompile checks policy compilation and evaluation on any text:
//   - Compile never panics, and gives the same verdict twice;
//   - a rejection is INVALID_ARGUMENT / INVALID_POLICY with one violation
//     on approval_policy.expression whose description is valid UTF-8;
//   - an accepted policy keeps its source, and evaluating it on empty,
//     typical and extreme inputs never panics, ends by itself (the cost
//     limit stops runaway expressions, never the test's deadline) and gives
//     the same answer every time.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		example, "true", `request.gpu_delta <= 1`, `request.kind in ["CHANGE_TEAM_QUOTA", "DELETE_VIRTUAL_CLUSTER"]`,
		`request.justification.size() >= 10 && request.justification.matches("(?i)paper")`,
		`["research", "platform"].exists(d, department.name == d)`, `[1, 2][request.gpu_delta > 0.0 ? 5 : 0] == 1`,
		`request.requester.endsWith("@example.com") || team.gpu_quota / 0.0 > 1.0`, `1 / 0 == 1`,
		`request.gpu_dleta <= 2.0`, `request.kind == "CREATE_VCLUSTER"`, `[1].all(a, [1].all(b, [1].all(c, true)))`,
		`request.justification.matches("([")`, `"a" + request.justification == "b"`, "request.gpu_delta <=",
		`int(request.gpu) * 9223372036854775807 > 0`, `size(request.justification + request.justification) > 0`,
	} {
		f.Add(s)
	}
	inputs := fuzzInputs()
	f.Fuzz(func(t *testing.T, expr string) {
		p, err := Compile(expr)
		_, err2 := Compile(expr)
		if (err == nil) != (err2 == nil) {
			t.Fatalf("Compile(%q) gave %v, then %v", expr, err, err2)
		}
		if err != nil {
			desc := invalidPolicy(t, expr)
			if desc == "" || !utf8.ValidString(desc) {
				t.Fatalf("Compile(%q): description %q is empty or not UTF-8", expr, desc)
			}
			return
		}
		if p.Expression() != expr {
			t.Fatalf("Expression() = %q, want %q", p.Expression(), expr)
		}
		for i, in := range inputs {
			first, err1 := evalBounded(t, p, in)
			second, err2 := evalBounded(t, p, in)
			if first != second || (err1 == nil) != (err2 == nil) {
				t.Fatalf("Eval(%q) on input %d: %v, %v then %v, %v", expr, i, first, err1, second, err2)
			}
			if err1 != nil && first {
				t.Fatalf("Eval(%q) on input %d approved with an error: %v", expr, i, err1)
			}
		}
	})
}

// evalBounded evaluates with a generous deadline; reaching it means the
// cost limit did not stop the expression.
func evalBounded(t *testing.T, p *Program, in Input) (bool, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ok, err := p.Eval(ctx, in)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Eval(%q) ran for 30s: the cost limit did not stop it", p.Expression())
	}
	return ok, err
}
