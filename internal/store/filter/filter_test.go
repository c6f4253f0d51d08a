package filter

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/errs"
)

var testSchema = Schema{
	"department":     {Column: "t.department_id", Type: String, Strip: "departments/"},
	"isolation_tier": {Column: "t.isolation_tier", Type: Enum, Enum: []string{"SHARED", "DEDICATED"}},
	"resource":       {Column: "a.resource", Type: String, Prefix: true},
	"team":           {Column: "t.team_id", Type: String, Strip: "teams/", Prefix: true},
	"name":           {Column: "t.display_name", Type: String},
	"time":           {Column: "a.created_at", Type: Timestamp},
	"active":         {Column: "t.active", Type: Bool},
	"uid":            {Column: "t.uid", Type: UUID},
}

func ts(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestCompile(t *testing.T) {
	tests := []struct {
		name     string
		expr     string
		firstArg int // 0 means 1
		sql      string
		args     []any
	}{
		{name: "empty", expr: "", sql: "TRUE"},
		{name: "blank", expr: " \t\r\n ", sql: "TRUE"},
		{name: "enum bare", expr: "isolation_tier = SHARED", sql: "t.isolation_tier = $1", args: []any{"SHARED"}},
		{name: "enum quoted not equal", expr: `isolation_tier != "DEDICATED"`, sql: "t.isolation_tier <> $1", args: []any{"DEDICATED"}},
		{name: "no spaces", expr: "isolation_tier=SHARED", sql: "t.isolation_tier = $1", args: []any{"SHARED"}},
		{
			name: "strip and AND", expr: `department = "departments/research" AND isolation_tier = SHARED`,
			sql: "(t.department_id = $1 AND t.isolation_tier = $2)", args: []any{"research", "SHARED"},
		},
		{
			name: "three terms, first arg offset", firstArg: 4,
			expr: "\tdepartment=departments/research\nAND active = true AND  name != \"x\" ",
			sql:  "(t.department_id = $4 AND t.active = $5 AND t.display_name <> $6)", args: []any{"research", true, "x"},
		},
		{name: "bool false", expr: "active = false", sql: "t.active = $1", args: []any{false}},
		{
			name: "uuid", expr: "uid = 4b1f2c8e-9d3a-4e5f-8a7b-6c5d4e3f2a1b",
			sql: "t.uid = $1::uuid", args: []any{"4b1f2c8e-9d3a-4e5f-8a7b-6c5d4e3f2a1b"},
		},
		{
			// Upper case is the same UUID; NULL (no UUID) is not it.
			name: "uuid not equal", expr: `uid != "4B1F2C8E-9D3A-4E5F-8A7B-6C5D4E3F2A1B"`,
			sql: "t.uid IS DISTINCT FROM $1::uuid", args: []any{"4b1f2c8e-9d3a-4e5f-8a7b-6c5d4e3f2a1b"},
		},
		{name: "bool quoted", expr: `active != "true"`, sql: "t.active <> $1", args: []any{true}},
		{name: "escapes", expr: `name = "say \"hi\" C:\\dir"`, sql: "t.display_name = $1", args: []any{`say "hi" C:\dir`}},
		{name: "unicode value", expr: `name = "Ünïcödé ✓"`, sql: "t.display_name = $1", args: []any{"Ünïcödé ✓"}},
		{name: "star inside non-prefix value is literal", expr: `name = "a*b"`, sql: "t.display_name = $1", args: []any{"a*b"}},
		{name: "prefix field exact", expr: `resource = "teams/a"`, sql: "a.resource = $1", args: []any{"teams/a"}},
		{
			name: "prefix", expr: `resource = "teams/team-a*" AND time >= "2026-01-01T00:00:00Z"`,
			sql: `(a.resource LIKE $1 ESCAPE '\' AND a.created_at >= $2)`, args: []any{"teams/team-a%", ts("2026-01-01T00:00:00Z")},
		},
		{
			name: "prefix escapes LIKE metacharacters", expr: `resource = "a%b_c\\d*"`,
			sql: `a.resource LIKE $1 ESCAPE '\'`, args: []any{`a\%b\_c\\d%`},
		},
		{name: "prefix not like", expr: `resource != "x*"`, sql: `a.resource NOT LIKE $1 ESCAPE '\'`, args: []any{"x%"}},
		{name: "prefix star only", expr: `resource = "*"`, sql: `a.resource LIKE $1 ESCAPE '\'`, args: []any{"%"}},
		{name: "strip then prefix", expr: `team = "teams/ml_*"`, sql: `t.team_id LIKE $1 ESCAPE '\'`, args: []any{`ml\_%`}},
		{name: "timestamp bare", expr: "time < 2026-01-01T00:00:00Z", sql: "a.created_at < $1", args: []any{ts("2026-01-01T00:00:00Z")}},
		{name: "timestamp <=", expr: `time <= "2026-01-01T00:00:00.123456789+02:00"`, sql: "a.created_at <= $1", args: []any{ts("2026-01-01T00:00:00.123456789+02:00")}},
		{name: "timestamp >", expr: `time>"2026-03-04T05:06:07Z"`, sql: "a.created_at > $1", args: []any{ts("2026-03-04T05:06:07Z")}},
		{name: "timestamp =", expr: `time = "2026-03-04T05:06:07Z"`, sql: "a.created_at = $1", args: []any{ts("2026-03-04T05:06:07Z")}},
		{name: "timestamp !=", expr: `time != "2026-03-04T05:06:07Z"`, sql: "a.created_at <> $1", args: []any{ts("2026-03-04T05:06:07Z")}},
		{
			name: "timestamp range", expr: `time >= "2026-01-01T00:00:00Z" AND time < "2026-02-01T00:00:00Z"`,
			sql: "(a.created_at >= $1 AND a.created_at < $2)", args: []any{ts("2026-01-01T00:00:00Z"), ts("2026-02-01T00:00:00Z")},
		},
		{
			name: "injection in value stays an arg", expr: `name = "x'; DROP TABLE teams; --"`,
			sql: "t.display_name = $1", args: []any{"x'; DROP TABLE teams; --"},
		},
		{
			name: "injection via escaped quote stays an arg", expr: `name = "\" OR 1=1 --" AND active = true`,
			sql: "(t.display_name = $1 AND t.active = $2)", args: []any{`" OR 1=1 --`, true},
		},
		{
			name: "injection in prefix stays an arg", expr: `resource = "') OR TRUE --*"`,
			sql: `a.resource LIKE $1 ESCAPE '\'`, args: []any{"') OR TRUE --%"},
		},
		{name: "keyword quoted is a value", expr: `name = "OR"`, sql: "t.display_name = $1", args: []any{"OR"}},
		{name: "max length", expr: `name = "` + strings.Repeat("a", MaxLength-9) + `"`, sql: "t.display_name = $1", args: []any{strings.Repeat("a", MaxLength-9)}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			first := tt.firstArg
			if first == 0 {
				first = 1
			}
			sql, args, err := Compile(tt.expr, testSchema, first)
			if err != nil {
				t.Fatalf("Compile(%q) error: %v", tt.expr, err)
			}
			if sql != tt.sql {
				t.Errorf("sql = %q, want %q", sql, tt.sql)
			}
			if !reflect.DeepEqual(args, tt.args) {
				t.Errorf("args = %#v, want %#v", args, tt.args)
			}
		})
	}
}

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name   string
		expr   string
		schema Schema // nil means testSchema
		want   string // substring of the violation description
	}{
		{name: "too long", expr: `name = "` + strings.Repeat("a", MaxLength-8) + `"`, want: "filter is 2049 bytes long; the maximum is 2048"},
		{name: "invalid utf8", expr: "name = \"\xff\"", want: "not valid UTF-8"},
		{name: "NUL", expr: "name = \"a\x00\"", want: "NUL character at position 10"},
		{name: "unknown field", expr: "color = red", want: `unknown field "color" at position 1; allowed fields: active, department, isolation_tier, name, resource, team, time, uid`},
		{name: "column name is not a field", expr: "department_id = x", want: `unknown field "department_id"`},
		{name: "dotted column is not a field", expr: "t.name = x", want: `unknown field "t.name"`},
		{name: "empty schema", expr: "a = b", schema: Schema{}, want: "this list cannot be filtered"},
		{name: "bad enum", expr: "isolation_tier = shared", want: `invalid value "shared" for field "isolation_tier" at position 18; allowed values: SHARED, DEDICATED`},
		{name: "bad bool", expr: "active = yes", want: `invalid value "yes" for field "active" at position 10; allowed values: true, false`},
		{name: "bad bool case", expr: "active = TRUE", want: `invalid value "TRUE"`},
		{name: "bad timestamp", expr: `time >= "2026-01-01"`, want: `invalid timestamp "2026-01-01" for field "time" at position 9; use RFC 3339`},
		{name: "timestamp needs quotes for +", expr: "time >= 2026-01-01T00:00:00+02:00", want: `unexpected character '+' at position 28; values with characters other than`},
		{name: "ordering on string", expr: "name < b", want: `operator "<" at position 6 is not supported for string field "name"; use = or !=`},
		{name: "ordering on enum", expr: "isolation_tier >= SHARED", want: `operator ">=" at position 16 is not supported for enum field`},
		{name: "ordering on bool", expr: "active > false", want: `not supported for bool field`},
		{name: "ordering on uuid", expr: "uid <= 4b1f2c8e-9d3a-4e5f-8a7b-6c5d4e3f2a1b", want: `not supported for uuid field "uid"`},
		{
			name: "bad uuid", expr: `uid = "teams/a"`,
			want: `invalid UUID "teams/a" for field "uid" at position 7; use the 8-4-4-4-12 hex form`,
		},
		{name: "uuid without dashes", expr: "uid = 4b1f2c8e9d3a4e5f8a7b6c5d4e3f2a1b", want: `invalid UUID "4b1f2c8e9d3a4e5f8a7b6c5d4e3f2a1b"`},
		{name: "uuid not hex", expr: "uid = 4b1f2c8e-9d3a-4e5f-8a7b-6c5d4e3f2a1g", want: `invalid UUID`},
		{name: "uuid too short", expr: "uid = 4b1f2c8e", want: `invalid UUID "4b1f2c8e"`},
		{name: "uuid too long", expr: "uid = 4b1f2c8e-9d3a-4e5f-8a7b-6c5d4e3f2a1bX", want: `invalid UUID "4b1f2c8e-9d3a-4e5f-8a7b-6c5d4e3f2a1bX"`},
		{name: "uuid braced", expr: `uid = "{4b1f2c8e-9d3a-4e5f-8a7b-6c5d4e3f2a1b}"`, want: `invalid UUID "{4b1f2c8e`},
		{name: "unterminated string", expr: `name = "abc`, want: "unterminated string starting at position 8"},
		{name: "unterminated after escape", expr: `name = "abc\`, want: "unterminated string starting at position 8"},
		{name: "unterminated escaped quote", expr: `name = "abc\"`, want: "unterminated string starting at position 8"},
		{name: "bad escape", expr: `name = "a\nb"`, want: `invalid escape "\n" at position 10; only \" and \\ are allowed`},
		{name: "empty quoted value", expr: `name = ""`, want: `empty value for field "name" at position 8`},
		{name: "empty enum value", expr: `isolation_tier = ""`, want: `empty value for field "isolation_tier"`},
		{name: "missing value", expr: "name =", want: `missing value for field "name" at position 7`},
		{name: "missing operator", expr: "name", want: `unexpected end of filter at position 5; expected an operator (=, !=, <, <=, >, >=) after "name"`},
		{name: "bare value", expr: "research", want: `expected an operator`},
		{name: "double equals", expr: "name == x", want: `unexpected "=" at position 7; expected a value for "name"`},
		{name: "bang", expr: "name ! x", want: `unexpected "!" at position 6; the not-equal operator is "!="`},
		{name: "strip wrong prefix", expr: `department = "research"`, want: `value "research" for field "department" at position 14 must have the form "departments/{id}"`},
		{name: "strip other collection", expr: `department = "teams/research"`, want: `must have the form "departments/{id}"`},
		{name: "strip nothing after", expr: `department = "departments/"`, want: `empty value for field "department" at position 14: nothing after "departments/"`},
		{name: "star on non-prefix field", expr: `name = "abc*"`, want: `field "name" does not support prefix matching with a trailing '*'`},
		{name: "star on strip non-prefix field", expr: `department = "departments/a*"`, want: `does not support prefix matching`},
		{name: "star in middle of prefix", expr: `resource = "a*b*"`, want: `only allowed as the last character`},
		{name: "star bare", expr: `resource = a*`, want: `unexpected character '*' at position 13`},
		{name: "OR", expr: "name = a OR name = b", want: "OR at position 10 is not supported: only AND of field comparisons is supported"},
		{name: "NOT leading", expr: "NOT name = a", want: "NOT at position 1 is not supported: only AND of field comparisons is supported"},
		{name: "NOT after AND", expr: "name = a AND NOT active = true", want: "NOT at position 14 is not supported: only AND"},
		{name: "minus negation", expr: "-name = a", want: `negation "-" at position 1 is not supported: only AND`},
		{name: "parentheses", expr: "(name = a)", want: "parenthesis at position 1 is not supported: only AND"},
		{name: "closing paren", expr: "name = a)", want: "parenthesis at position 9 is not supported: only AND"},
		{name: "paren value", expr: "name = (a)", want: "parenthesis at position 8 is not supported: only AND"},
		{name: "function", expr: `regex(name, "a")`, want: "function call at position 1 is not supported: only AND"},
		{name: "has operator", expr: "isolation_tier:SHARED", want: `the ":" (has) operator at position 15 is not supported; use "="`},
		{name: "has operator spaced", expr: "isolation_tier : SHARED", want: `the ":" (has) operator at position 16 is not supported`},
		{name: "has operator quoted", expr: `name:"x"`, want: `the ":" (has) operator at position 5`},
		{name: "implicit AND", expr: "name = a active = true", want: `unexpected "active" at position 10; expected AND or end of filter`},
		{name: "lowercase and", expr: "name = a and active = true", want: `unexpected "and" at position 10; expected AND or end of filter (keywords are upper case)`},
		{name: "trailing AND", expr: "name = a AND", want: "unexpected end of filter at position 13; expected a field name"},
		{name: "leading AND", expr: "AND name = a", want: `unexpected "AND" at position 1; expected a field name`},
		{name: "double AND", expr: "name = a AND AND name = b", want: `unexpected "AND" at position 14; expected a field name`},
		{name: "string as field", expr: `"name" = a`, want: `unexpected "name" (string) at position 1; expected a field name`},
		{name: "operator first", expr: "= a", want: `unexpected "=" at position 1; expected a field name`},
		{name: "keyword as value", expr: "name = AND", want: `unexpected "AND" at position 8; expected a value for "name" (double-quote it to use AND literally)`},
		{name: "operator as value", expr: "name = <", want: `unexpected "<" at position 8; expected a value for "name"`},
		{name: "odd character", expr: "name ~ a", want: `unexpected character '~' at position 6`},
		{name: "semicolon injection", expr: "name = a; DROP TABLE teams", want: `unexpected character ';' at position 9`},
		{name: "comment injection", expr: "name = a --", want: `unexpected "--" at position 10; expected AND or end of filter`},
		{name: "quote injection", expr: "name = a' OR '1'='1", want: `unexpected character '\'' at position 9`},
		{name: "earlier error wins over later lex error", expr: `color = red AND name = "x`, want: `unknown field "color"`},
		{name: "lex error glued to value wins", expr: `name = a;`, want: `unexpected character ';' at position 9`},
		{name: "bad escape as value", expr: `name = "\t"`, want: `invalid escape "\t" at position 9`},
		{name: "position counts characters", expr: `name = "ü" OR`, want: "OR at position 12"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			schema := tt.schema
			if schema == nil {
				schema = testSchema
			}
			sql, args, err := Compile(tt.expr, schema, 1)
			if err == nil {
				t.Fatalf("Compile(%q) = %q, %v; want error", tt.expr, sql, args)
			}
			desc := checkInvalid(t, err)
			if !strings.Contains(desc, tt.want) {
				t.Errorf("error %q\ndoes not contain %q", desc, tt.want)
			}
			if sql != "" || args != nil {
				t.Errorf("got sql %q, args %v alongside an error", sql, args)
			}
		})
	}
}

// checkInvalid asserts err is an INVALID_FILTER violation on "filter" and
// returns its description.
func checkInvalid(t *testing.T, err error) string {
	t.Helper()
	e, ok := errs.As(err)
	if !ok {
		t.Fatalf("error %v (%T) is not an *errs.Error", err, err)
	}
	if e.Kind != errs.KindInvalidArgument || e.Reason != errs.ReasonInvalidFilter {
		t.Fatalf("error kind/reason = %v/%s, want invalid argument/%s", e.Kind, e.Reason, errs.ReasonInvalidFilter)
	}
	if len(e.Violations) != 1 || e.Violations[0].Field != "filter" {
		t.Fatalf("violations = %+v, want one on field filter", e.Violations)
	}
	return e.Violations[0].Description
}

func TestCompileProgrammerErrors(t *testing.T) {
	if _, _, err := Compile("name = a", testSchema, 0); errs.KindOf(err) != errs.KindUnknown || err == nil {
		t.Errorf("firstArg 0: err = %v, want internal error", err)
	}
	bad := Schema{"x": {Column: "t.x", Type: Type(42)}}
	_, _, err := Compile("x = y", bad, 1)
	if e, ok := errs.As(err); !ok || e.Reason != errs.ReasonInternal {
		t.Errorf("unknown type: err = %v, want internal error", err)
	}
}

func TestErrorRendering(t *testing.T) {
	_, _, err := Compile("color = red", Schema{"name": {Column: "n", Type: String}}, 1)
	want := `invalid filter: filter: unknown field "color" at position 1; allowed fields: name`
	if err == nil || err.Error() != want {
		t.Errorf("err = %v, want %s", err, want)
	}
}

// fuzzSchema uses columns with characters that would be caught by the SQL
// shape check if a value ever leaked into the SQL.
