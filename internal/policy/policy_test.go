package policy

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/quota"
)

const example = `request.gpu_delta <= 2.0 && department.name == "research"`

func input(gpuDelta float64, department string) Input {
	return Input{
		Request: Request{
			Kind:      KindChangeVirtualClusterQuota,
			GPUDelta:  gpuDelta,
			Requester: "alice@example.com",
		},
		Team:       Team{Name: "vision", IsolationTier: TierShared, GPUQuota: 8},
		Department: Department{Name: department, GPUBudget: 32},
	}
}

func mustCompile(t *testing.T, expr string) *Program {
	t.Helper()
	p, err := Compile(expr)
	if err != nil {
		t.Fatalf("Compile(%q): %v", expr, err)
	}
	return p
}

func TestExamplePolicy(t *testing.T) {
	p := mustCompile(t, example)
	if p.Expression() != example {
		t.Fatalf("Expression() = %q", p.Expression())
	}
	tests := []struct {
		name string
		in   Input
		want bool
	}{
		{"small research request", input(1, "research"), true},
		{"exactly at the limit", input(2, "research"), true},
		{"too large", input(2.5, "research"), false},
		{"other department", input(1, "finance"), false},
		{"shrinking", input(-4, "research"), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.Eval(context.Background(), tt.in)
			if err != nil || got != tt.want {
				t.Fatalf("Eval = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestPolicyFeatures(t *testing.T) {
	in := input(0.25, "research")
	in.Request.Kind = KindCreateVirtualCluster
	in.Request.Justification = "training run for the Q3 paper"
	in.Request.Expires = true
	in.Request.FractionalGPUs = true
	tests := []struct {
		expr string
		want bool
	}{
		{`request.gpu_delta <= 1.0`, true},
		{`request.gpu_delta <= 1`, true}, // int literal against a double
		{`request.gpu_delta == 0.25`, true},
		{`request.gpu_delta < 0.25`, false},
		{`request.kind == "CREATE_VIRTUAL_CLUSTER" && request.expires`, true},
		{`request.kind in ["CHANGE_TEAM_QUOTA", "DELETE_VIRTUAL_CLUSTER"]`, false},
		{`team.isolation_tier == "SHARED" && request.fractional_gpus`, true},
		{`team.gpu_quota + request.gpu_delta <= department.gpu_budget / 4.0`, false},
		{`request.requester.endsWith("@example.com")`, true},
		{`request.justification.size() >= 10 && request.justification.matches("(?i)paper")`, true},
		{`["research", "platform"].exists(d, department.name == d)`, true},
		{`true`, true},
	}
	for _, tt := range tests {
		t.Run(tt.expr, func(t *testing.T) {
			got, err := mustCompile(t, tt.expr).Eval(context.Background(), in)
			if err != nil || got != tt.want {
				t.Fatalf("Eval = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func invalidPolicy(t *testing.T, expr string) string {
	t.Helper()
	p, err := Compile(expr)
	if err == nil {
		t.Fatalf("Compile(%q) succeeded: %v", expr, p)
	}
	e, ok := errs.As(err)
	if !ok || e.Kind != errs.KindInvalidArgument || e.Reason != errs.ReasonInvalidPolicy {
		t.Fatalf("Compile(%q) error = %#v, want InvalidArgument/INVALID_POLICY", expr, err)
	}
	if len(e.Violations) != 1 || e.Violations[0].Field != "approval_policy.expression" {
		t.Fatalf("violations = %+v", e.Violations)
	}
	return e.Violations[0].Description
}

func TestCompileRejects(t *testing.T) {
	tests := []struct {
		name string
		expr string
		want []string
	}{
		{"typo in field", `request.gpu_dleta <= 2.0`,
			[]string{"undefined field 'gpu_dleta'", "request.gpu_dleta", "^", `did you mean "gpu_delta"?`}},
		{"typo in variable", `departmnet.name == "research"`,
			[]string{"undeclared reference to 'departmnet'", "department", "the variables are request, team, department"}},
		{"int literal in equality", `request.gpu == 2`, []string{"no matching overload", "2.0 instead of 2"}},
		{"unknown field, no close match", `team.owner == "bob"`,
			[]string{"undefined field 'owner'", "Available fields:", "isolation_tier"}},
		{"not bool", `request.gpu_delta + 1.0`, []string{"yields double", "must yield bool"}},
		{"string result", `department.name`, []string{"yields string"}},
		{"type mismatch", `request.gpu_delta <= "2"`, []string{"no matching overload"}},
		{"syntax error", `request.gpu_delta <=`, []string{"Syntax error"}},
		{"empty", "  \n", []string{"empty"}},
		{"too long", "true || " + strings.Repeat("true || ", MaxExpressionBytes/8) + "true", []string{"at most 4096"}},
		{"unknown kind literal", `request.kind == "CREATE_VCLUSTER"`,
			[]string{`request.kind is never "CREATE_VCLUSTER"`, "1:17", "CREATE_VIRTUAL_CLUSTER"}},
		{"unknown kind in list", `request.kind in ["CHANGE_TEAM_QUOTA", "delete_virtual_cluster"]`,
			[]string{`never "delete_virtual_cluster"`}},
		{"unknown tier reversed", `"SHARD" != team.isolation_tier`,
			[]string{`team.isolation_tier is never "SHARD"`, `did you mean "SHARED"?`}},
		{"bad regex", `request.justification.matches("([")`, []string{"invalid"}},
		{"deep loops", `[1].all(a, [1].all(b, [1].all(c, true)))`, []string{"nesting"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			desc := invalidPolicy(t, tt.expr)
			for _, w := range tt.want {
				if !strings.Contains(desc, w) {
					t.Errorf("description lacks %q:\n%s", w, desc)
				}
			}
		})
	}
}

func TestEvalCostLimit(t *testing.T) {
	// 100 x 100 iterations, each scanning a 1 KiB string: a few hundred
	// thousand cost units, which must be stopped rather than run.
	list := "[" + strings.TrimSuffix(strings.Repeat("1,", 100), ",") + "]"
	expr := list + ".all(a, " + list + ".all(b, !request.justification.contains(string(a + b) + 'zz')))"
	p := mustCompile(t, expr)
	in := input(0, "research")
	in.Request.Justification = strings.Repeat("x", 1024)
	ok, err := p.Eval(context.Background(), in)
	if ok || !errors.Is(err, ErrCostLimit) {
		t.Fatalf("Eval = %v, %v; want ErrCostLimit", ok, err)
	}
}

func TestEvalRuntimeErrorIsNoMatch(t *testing.T) {
	p := mustCompile(t, `[1, 2][request.gpu_delta > 0.0 ? 5 : 0] == 1`)
	ok, err := p.Eval(context.Background(), input(1, "research"))
	if ok || err == nil || !strings.Contains(err.Error(), "index") {
		t.Fatalf("Eval = %v, %v; want a no-match with an index error", ok, err)
	}
	if ok, err := p.Eval(context.Background(), input(-1, "research")); !ok || err != nil {
		t.Fatalf("Eval on the other branch = %v, %v", ok, err)
	}
}

func TestEvalRespectsContext(t *testing.T) {
	p := mustCompile(t, example)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok, err := p.Eval(ctx, input(1, "research"))
	if ok || !errors.Is(err, context.Canceled) {
		t.Fatalf("Eval on cancelled ctx = %v, %v", ok, err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel()
	<-ctx.Done()
	if _, err := p.Eval(ctx, input(1, "research")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Eval on expired ctx err = %v", err)
	}
}

func TestEvalConcurrent(t *testing.T) {
	p := mustCompile(t, example)
	done := make(chan error)
	for i := range 8 {
		go func() {
			ok, err := p.Eval(context.Background(), input(float64(i%4), "research"))
			if err == nil && ok != (i%4 <= 2) {
				err = errors.New("wrong answer")
			}
			done <- err
		}()
	}
	for range 8 {
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}
}

func TestSetQuantities(t *testing.T) {
	mustGPU := func(s string) quota.GPU {
		g, err := quota.ParseGPU(s)
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	current := quota.Resources{GPU: mustGPU("0.2"), CPUMillis: 2000, MemoryBytes: 8 << 30}
	requested := quota.Resources{GPU: mustGPU("0.3"), CPUMillis: 2500, MemoryBytes: 12 << 30}
	var r Request
	r.SetQuantities(requested, current)
	// 0.3 - 0.2 in float64 is 0.09999999999999998; from integers it is the
	// same double as the literal 0.1.
	if r.GPUDelta != 0.1 || r.GPU != 0.3 || r.CPUDelta != 0.5 || r.CPU != 2.5 || r.MemoryDeltaGiB != 4 || r.MemoryGiB != 12 {
		t.Fatalf("SetQuantities = %+v", r)
	}
	if !r.FractionalGPUs {
		t.Fatal("0.3 GPU not flagged as fractional")
	}
	in := Input{Request: r}
	if ok, err := mustCompile(t, `request.gpu_delta <= 0.1`).Eval(context.Background(), in); !ok || err != nil {
		t.Fatalf("0.1 GPU step did not match <= 0.1: %v, %v", ok, err)
	}

	var del Request
	del.SetQuantities(quota.Resources{}, quota.Resources{GPU: quota.GPUs(2)})
	if del.GPUDelta != -2 || del.GPU != 0 || del.FractionalGPUs {
		t.Fatalf("delete = %+v", del)
	}
}

func TestEditDistance(t *testing.T) {
	tests := []struct {
		a, b string
		want int
	}{
		{"gpu_dleta", "gpu_delta", 1}, {"", "abc", 3}, {"kind", "kind", 0}, {"departmnet", "department", 1}, {"cpu", "gpu", 1}, //nolint:misspell // typos are the input under test
	}
	for _, tt := range tests {
		if got := editDistance(tt.a, tt.b); got != tt.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tt.a, tt.b, got, tt.want)
		}
	}
}
