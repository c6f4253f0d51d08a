// Package policy compiles and evaluates auto-approval policies: CEL
// expressions such as
//
//	request.gpu_delta <= 2.0 && department.name == "research"
//
// over a request, its team and its department. Compile type-checks against
// typed declarations of those three variables, so a misspelt field or a
// non-boolean policy is refused when it is saved, not discovered when a
// request silently fails to auto-approve. The package is pure: no storage or
// transport; errors are internal/errs values.
package policy

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"cel.dev/cel-go/cel"
	"cel.dev/cel-go/common/ast"
	"cel.dev/cel-go/common/types"
	"cel.dev/cel-go/ext"
	"cel.dev/cel-go/interpreter"

	"github.com/gpuplane/gpuplane/internal/errs"
)

const (
	// ExpressionField is the API field path compile errors are reported on.
	ExpressionField = "approval_policy.expression"
	// MaxExpressionBytes bounds what is parsed and stored; real policies are
	// a line or two.
	MaxExpressionBytes = 4096
	// MaxEvalCost bounds one evaluation in CEL cost units (roughly one per
	// operation, more for string and list work proportional to size). A
	// realistic policy costs tens; the limit only stops expressions built to
	// burn CPU inside the approval path.
	MaxEvalCost = 100_000
	// maxComprehensionNesting allows e.g. ["a", "b"].exists(x, ...) but not
	// the nested loops whose cost grows multiplicatively.
	maxComprehensionNesting = 2
	// interruptEvery is how many comprehension iterations run between checks
	// of ctx, so a cancelled request stops a long evaluation promptly.
	interruptEvery = 100
)

// ErrCostLimit marks an evaluation stopped by MaxEvalCost.
var ErrCostLimit = errors.New("approval policy exceeded its evaluation cost limit")

// Program is a compiled policy. It is immutable and safe for concurrent use.
type Program struct {
	expr string
	prg  cel.Program
}

// Expression returns the source the program was compiled from.
func (p *Program) Expression() string { return p.expr }

// CEL object type names of the declared variables. ext.NativeTypes names a
// Go struct "<package>.<Type>"; envOnce fails loudly if that ever changes.
var varTypes = []struct {
	name     string
	typeName string
	goType   reflect.Type
}{
	{"request", "policy.Request", reflect.TypeFor[Request]()},
	{"team", "policy.Team", reflect.TypeFor[Team]()},
	{"department", "policy.Department", reflect.TypeFor[Department]()},
}

var envOnce = sync.OnceValues(func() (*cel.Env, error) {
	opts := []cel.EnvOption{
		ext.NativeTypes(reflect.TypeFor[Request](), reflect.TypeFor[Team](), reflect.TypeFor[Department](),
			ext.ParseStructTags(true)),
		// Lets authors write request.gpu_delta <= 2 instead of 2.0; without it
		// the int literal is a type error that surprises everyone once.
		cel.CrossTypeNumericComparisons(true),
		cel.ParserExpressionSizeLimit(MaxExpressionBytes),
		cel.ASTValidators(cel.ValidateComprehensionNestingLimit(maxComprehensionNesting)),
		// Catches bad regex and duration literals at compile time.
		cel.ExtendedValidations(),
	}
	for _, v := range varTypes {
		opts = append(opts, cel.Variable(v.name, cel.ObjectType(v.typeName)))
	}
	env, err := cel.NewEnv(opts...)
	if err != nil {
		return nil, fmt.Errorf("policy: build CEL environment: %w", err)
	}
	for _, v := range varTypes {
		if _, ok := env.CELTypeProvider().FindStructType(v.typeName); !ok {
			return nil, fmt.Errorf("policy: CEL type %s for %s is not registered", v.typeName, v.goType)
		}
	}
	return env, nil
})

// Compile parses and type-checks expr. A policy must be a boolean
// expression over request, team and department. Problems are returned as
// KindInvalidArgument / INVALID_POLICY with one violation on
// ExpressionField whose description is the (possibly multi-line) CEL
// diagnostic plus a suggestion for a misspelt name.
func Compile(expr string) (*Program, error) {
	switch {
	case strings.TrimSpace(expr) == "":
		return nil, invalid("the expression is empty; write a condition such as request.gpu_delta <= 1")
	case len(expr) > MaxExpressionBytes:
		return nil, invalid("the expression is %d bytes long; at most %d are allowed", len(expr), MaxExpressionBytes)
	case !utf8.ValidString(expr):
		return nil, invalid("the expression is not valid UTF-8")
	}
	env, err := envOnce()
	if err != nil {
		return nil, errs.Wrap(err, errs.KindUnknown, errs.ReasonInternal, "approval policies are unavailable")
	}
	checked, iss := env.Compile(expr)
	if iss.Err() != nil {
		return nil, invalid("%s", describeIssues(iss))
	}
	if out := checked.OutputType(); !out.IsExactType(cel.BoolType) {
		return nil, invalid("the expression yields %s, but a policy must yield bool (true = approve automatically)", out)
	}
	if problems := checkEnumLiterals(checked); len(problems) > 0 {
		return nil, invalid("%s", strings.Join(problems, "\n"))
	}
	prg, err := env.Program(checked,
		cel.CostLimit(MaxEvalCost),
		cel.InterruptCheckFrequency(interruptEvery),
		// Folds constants once here rather than on every evaluation.
		cel.EvalOptions(cel.OptOptimize),
	)
	if err != nil {
		// Optimisation evaluates constant sub-expressions, so e.g. a bad
		// constant regex surfaces here.
		return nil, invalid("%v", err)
	}
	return &Program{expr: expr, prg: prg}, nil
}

// Eval reports whether the policy approves in. Any error means "does not
// match": the caller falls back to manual approval and should log the error
// (it names the cause, e.g. ErrCostLimit or the context's error). Evaluation
// stops when ctx is done.
func (p *Program) Eval(ctx context.Context, in Input) (bool, error) {
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("approval policy not evaluated: %w", err)
	}
	out, _, err := p.prg.ContextEval(ctx, map[string]any{
		"request":    in.Request,
		"team":       in.Team,
		"department": in.Department,
	})
	if err != nil {
		var cancelled interpreter.EvalCancelledError
		switch {
		case ctx.Err() != nil:
			return false, fmt.Errorf("approval policy evaluation stopped: %w", ctx.Err())
		case errors.As(err, &cancelled) && cancelled.Cause == interpreter.CostLimitExceeded:
			return false, fmt.Errorf("%w (%d)", ErrCostLimit, MaxEvalCost)
		}
		return false, fmt.Errorf("approval policy evaluation failed: %w", err)
	}
	matched, ok := out.Value().(bool)
	if !ok {
		return false, fmt.Errorf("approval policy yielded %s, not bool", out.Type())
	}
	return matched, nil
}

func invalid(format string, args ...any) *errs.Error {
	e := errs.New(errs.KindInvalidArgument, errs.ReasonInvalidPolicy, "invalid approval policy")
	e.Violations = []errs.FieldViolation{{Field: ExpressionField, Description: fmt.Sprintf(format, args...)}}
	return e
}

// describeIssues keeps CEL's own report (message, source line and caret)
// and adds a "did you mean" for misspelt fields and variables, which is the
// most common mistake and the one CEL's text does not help with.
func describeIssues(iss *cel.Issues) string {
	var b strings.Builder
	b.WriteString(strings.TrimSpace(iss.String()))
	for _, e := range iss.Errors() {
		if hint := suggest(e.Message); hint != "" {
			b.WriteString("\n")
			b.WriteString(hint)
		}
	}
	return b.String()
}

// suggest adds advice for the CEL messages people hit most: misspelt
// fields and variables, and comparing a double quantity with an int literal
// using == (ordering comparisons accept mixed numbers, equality does not).
func suggest(msg string) string {
	switch {
	case strings.HasPrefix(msg, "undefined field '"):
		hint := "Available fields: " + knownFields()
		if best := closest(between(msg, "undefined field '", "'"), allFieldNames()); best != "" {
			hint = fmt.Sprintf("did you mean %q? %s", best, hint)
		}
		return hint
	case strings.HasPrefix(msg, "undeclared reference to '"):
		var names []string
		for _, v := range varTypes {
			names = append(names, v.name)
		}
		hint := "the variables are " + strings.Join(names, ", ")
		// Newer CEL releases make the suggestion themselves.
		if best := closest(between(msg, "undeclared reference to '", "'"), names); best != "" && !strings.Contains(msg, "did you mean") {
			hint = fmt.Sprintf("did you mean %q? %s", best, hint)
		}
		return hint
	case strings.Contains(msg, "applied to '(double, int)'") || strings.Contains(msg, "applied to '(int, double)'"):
		return "quantities are doubles: write whole numbers with a decimal point, e.g. 2.0 instead of 2"
	}
	return ""
}

func between(s, prefix, suffix string) string {
	rest := strings.TrimPrefix(s, prefix)
	v, _, _ := strings.Cut(rest, suffix)
	return v
}

// knownFields is the cheat sheet appended to a field hint.
func knownFields() string {
	var parts []string
	for _, v := range varTypes {
		parts = append(parts, fmt.Sprintf("%s: %s", v.name, strings.Join(fieldNames(v.goType), ", ")))
	}
	return strings.Join(parts, "; ")
}

func fieldNames(t reflect.Type) []string {
	var names []string
	for f := range t.Fields() {
		if tag, _, _ := strings.Cut(f.Tag.Get("cel"), ","); tag != "" && tag != "-" {
			names = append(names, tag)
		}
	}
	return names
}

func allFieldNames() []string {
	var names []string
	for _, v := range varTypes {
		names = append(names, fieldNames(v.goType)...)
	}
	return names
}

// closest returns the candidate within a small edit distance of s, or "".
func closest(s string, candidates []string) string {
	best, bestDist := "", 3 // more than 2 edits is a different word, not a typo
	for _, c := range candidates {
		if d := editDistance(s, c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance (Levenshtein plus
// adjacent transposition, so "dleta" is one edit from "delta").
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	rows := make([][]int, len(ra)+1)
	for i := range rows {
		rows[i] = make([]int, len(rb)+1)
		rows[i][0] = i
	}
	for j := range rows[0] {
		rows[0][j] = j
	}
	for i := 1; i <= len(ra); i++ {
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			rows[i][j] = min(rows[i-1][j]+1, rows[i][j-1]+1, rows[i-1][j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				rows[i][j] = min(rows[i][j], rows[i-2][j-2]+1)
			}
		}
	}
	return rows[len(ra)][len(rb)]
}

// checkEnumLiterals finds comparisons of request.kind or team.isolation_tier
// with string constants that are not valid values (==, != and in).
func checkEnumLiterals(checked *cel.Ast) []string {
	native := checked.NativeRep()
	enumOf := func(e ast.Expr) (field string, values []string) {
		if e.Kind() != ast.SelectKind {
			return "", nil
		}
		sel := e.AsSelect()
		if sel.IsTestOnly() {
			return "", nil
		}
		operand := native.GetType(sel.Operand().ID())
		switch {
		case operand.TypeName() == "policy.Request" && sel.FieldName() == "kind":
			return "request.kind", knownKinds
		case operand.TypeName() == "policy.Team" && sel.FieldName() == "isolation_tier":
			return "team.isolation_tier", knownTiers
		}
		return "", nil
	}
	var problems []string
	report := func(field string, values []string, lit ast.Expr) {
		if lit.Kind() != ast.LiteralKind {
			return
		}
		s, ok := lit.AsLiteral().(types.String)
		if !ok || slices.Contains(values, string(s)) {
			return
		}
		loc := native.SourceInfo().GetStartLocation(lit.ID())
		hint := ""
		if best := closest(string(s), values); best != "" {
			hint = fmt.Sprintf("; did you mean %q?", best)
		}
		problems = append(problems, fmt.Sprintf("%d:%d: %s is never %q%s (values: %s)",
			loc.Line(), loc.Column()+1, field, string(s), hint, strings.Join(values, ", ")))
	}
	ast.PreOrderVisit(native.Expr(), ast.NewExprVisitor(func(e ast.Expr) {
		if e.Kind() != ast.CallKind {
			return
		}
		call := e.AsCall()
		args := call.Args()
		if len(args) != 2 {
			return
		}
		switch call.FunctionName() {
		case "_==_", "_!=_":
			for i := range 2 {
				if field, values := enumOf(args[i]); field != "" {
					report(field, values, args[1-i])
				}
			}
		case "@in":
			if field, values := enumOf(args[0]); field != "" && args[1].Kind() == ast.ListKind {
				for _, el := range args[1].AsList().Elements() {
					report(field, values, el)
				}
			}
		}
	}))
	return problems
}
