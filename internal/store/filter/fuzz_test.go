package filter

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// fuzzSchema has a field of every type and option, and a column that is an
// expression.
var fuzzSchema = Schema{
	"s":   {Column: "t.s", Type: String},
	"sp":  {Column: "lower(t.sp)", Type: String, Prefix: true},
	"dep": {Column: "t.dep_id", Type: String, Strip: "departments/", Prefix: true},
	"e":   {Column: "t.e", Type: Enum, Enum: []string{"A", "B_C"}},
	"ts":  {Column: "t.ts", Type: Timestamp},
	"b":   {Column: "t.b", Type: Bool},
	"u":   {Column: "t.u", Type: UUID},
}

// termPattern is every shape a compiled comparison may take: a schema
// column, an operator and a placeholder, nothing from the filter text.
var termPattern = regexp.MustCompile(`^(\S+) (=|<>|<|<=|>|>=|LIKE|NOT LIKE|IS DISTINCT FROM) \$(\d+)( ESCAPE '\\'|::uuid)?$`)

// FuzzCompile checks, for any filter text and first placeholder number:
//   - Compile never panics;
//   - a rejection is INVALID_ARGUMENT / INVALID_FILTER with one violation on
//     "filter" and no output;
//   - an accepted filter compiles to schema columns, operators and
//     consecutive placeholders only (no byte of a value reaches the SQL),
//     with one argument of the field's type per placeholder, strings free
//     of NUL and invalid UTF-8;
//   - formatting the compiled filter back to filter text (canonical form)
//     and compiling that gives the same SQL and arguments.
//
// Seeds: testdata/fuzz/FuzzCompile and the list below.
func FuzzCompile(f *testing.F) {
	for _, s := range []string{
		"",
		"s = a",
		`s = "x\"y\\z" AND b = true AND e != B_C`,
		`sp = "a%_\\*" AND dep = "departments/x*"`,
		`dep != "departments/r"`,
		`ts >= "2026-01-01T00:00:00Z" AND ts < 2026-02-01T00:00:00.5Z`,
		`s = "'; DROP TABLE t; --"`,
		`s = a OR s = b`,
		`NOT (s = a)`,
		`s:a`,
		`s = "unterminated`,
		`e = Z`,
		"s = \"\xff\"",
		`s = "ü" AND sp = "ü*"`,
		`u = 4b1f2c8e-9d3a-4e5f-8a7b-6c5d4e3f2a1b AND u != "4B1F2C8E-9D3A-4E5F-8A7B-6C5D4E3F2A1B"`,
		`u = "4b1f2c8e9d3a4e5f8a7b6c5d4e3f2a1b"`,
		`u < 4b1f2c8e-9d3a-4e5f-8a7b-6c5d4e3f2a1b`,
	} {
		f.Add(s, uint8(0))
	}
	columns := map[string]string{}
	for name, field := range fuzzSchema {
		columns[field.Column] = name
	}
	f.Fuzz(func(t *testing.T, expr string, off uint8) {
		firstArg := int(off) + 1
		sql, args, err := Compile(expr, fuzzSchema, firstArg)
		if err != nil {
			wantFilterError(t, expr, sql, args, err)
			return
		}
		if sql == "TRUE" {
			if args != nil || strings.Trim(expr, spaceChars) != "" {
				t.Fatalf("Compile(%q) = TRUE %v for a non-blank filter", expr, args)
			}
			return
		}
		canonical := decompile(t, expr, sql, args, firstArg, columns)
		sql2, args2, err := Compile(canonical, fuzzSchema, firstArg)
		if err != nil {
			t.Fatalf("canonical form %q of %q does not compile: %v", canonical, expr, err)
		}
		if sql2 != sql || !sameArgs(args, args2) {
			t.Fatalf("round trip changed the filter:\n  %q -> %s %v\n  %q -> %s %v", expr, sql, args, canonical, sql2, args2)
		}
	})
}

func wantFilterError(t *testing.T, expr, sql string, args []any, err error) {
	t.Helper()
	if d := checkInvalid(t, err); d == "" || !utf8.ValidString(d) {
		t.Fatalf("Compile(%q): violation description %q is empty or not UTF-8", expr, d)
	}
	if sql != "" || args != nil {
		t.Fatalf("Compile(%q) returned SQL %q / args %v with an error", expr, sql, args)
	}
}

// decompile checks the shape of sql and turns it back into filter text.
func decompile(t *testing.T, expr, sql string, args []any, firstArg int, columns map[string]string) string {
	t.Helper()
	terms := []string{sql}
	if inner, ok := strings.CutPrefix(sql, "("); ok {
		inner, ok = strings.CutSuffix(inner, ")")
		if !ok {
			t.Fatalf("Compile(%q) = %q: unbalanced parentheses", expr, sql)
		}
		terms = strings.Split(inner, " AND ")
		if len(terms) < 2 {
			t.Fatalf("Compile(%q) = %q: one term in parentheses", expr, sql)
		}
	}
	if len(terms) != len(args) {
		t.Fatalf("Compile(%q) = %q with %d args for %d terms", expr, sql, len(args), len(terms))
	}
	var out []string
	for i, term := range terms {
		m := termPattern.FindStringSubmatch(term)
		if m == nil {
			t.Fatalf("Compile(%q): term %q is not column-operator-placeholder", expr, term)
		}
		name, ok := columns[m[1]]
		if !ok {
			t.Fatalf("Compile(%q): term %q uses %q, not a schema column", expr, term, m[1])
		}
		if n, _ := strconv.Atoi(m[3]); n != firstArg+i {
			t.Fatalf("Compile(%q): placeholder $%s in term %d, want $%d", expr, m[3], i, firstArg+i)
		}
		like := strings.HasSuffix(m[2], "LIKE")
		if like != (m[4] == ` ESCAPE '\'`) {
			t.Fatalf("Compile(%q): term %q: ESCAPE belongs to LIKE only", expr, term)
		}
		uuidField := fuzzSchema[name].Type == UUID
		if uuidField != (m[4] == "::uuid") {
			t.Fatalf("Compile(%q): term %q: a uuid cast belongs to uuid fields only", expr, term)
		}
		if (m[2] == "IS DISTINCT FROM") != (uuidField && m[2] != "=") {
			t.Fatalf("Compile(%q): term %q: IS DISTINCT FROM is a uuid field's != only", expr, term)
		}
		out = append(out, name+" "+filterOp(m[2])+" "+filterValue(t, expr, fuzzSchema[name], like, args[i]))
	}
	return strings.Join(out, " AND ")
}

func filterOp(sqlOp string) string {
	switch sqlOp {
	case "<>", "NOT LIKE", "IS DISTINCT FROM":
		return "!="
	case "LIKE":
		return "="
	}
	return sqlOp
}

// filterValue renders an argument as the quoted filter value that yields it.
func filterValue(t *testing.T, expr string, f Field, like bool, arg any) string {
	t.Helper()
	var v string
	switch f.Type {
	case String, Enum:
		s, ok := arg.(string)
		if !ok {
			t.Fatalf("Compile(%q): %s argument %T", expr, f.Type, arg)
		}
		if strings.IndexByte(s, 0) >= 0 || !utf8.ValidString(s) {
			t.Fatalf("Compile(%q): argument %q has NUL or invalid UTF-8", expr, s)
		}
		if f.Type == Enum && !containsString(f.Enum, s) {
			t.Fatalf("Compile(%q): enum argument %q not among %v", expr, s, f.Enum)
		}
		if like {
			s = unlike(t, expr, s) + "*"
		}
		v = f.Strip + s
	case Timestamp:
		ts, ok := arg.(time.Time)
		if !ok {
			t.Fatalf("Compile(%q): timestamp argument %T", expr, arg)
		}
		v = ts.Format(time.RFC3339Nano)
	case Bool:
		b, ok := arg.(bool)
		if !ok {
			t.Fatalf("Compile(%q): bool argument %T", expr, arg)
		}
		v = strconv.FormatBool(b)
	case UUID:
		u, ok := arg.(string)
		if !ok || !isUUID(u) || u != strings.ToLower(u) {
			t.Fatalf("Compile(%q): uuid argument %#v is not a lower-case canonical UUID", expr, arg)
		}
		v = u
	default:
		t.Fatalf("unknown field type %v", f.Type)
	}
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(v) + `"`
}

// unlike undoes likeEscaper on a prefix pattern ending in an unescaped '%'.
func unlike(t *testing.T, expr, pattern string) string {
	t.Helper()
	body, ok := strings.CutSuffix(pattern, "%")
	if !ok {
		t.Fatalf("Compile(%q): LIKE pattern %q does not end in %%", expr, pattern)
	}
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		switch {
		case c == '\\' && i+1 < len(body) && strings.IndexByte(`\%_`, body[i+1]) >= 0:
			b.WriteByte(body[i+1])
			i++
		case c == '\\' || c == '%' || c == '_':
			t.Fatalf("Compile(%q): LIKE pattern %q has an unescaped %q", expr, pattern, c)
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func sameArgs(a, b []any) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if ta, ok := a[i].(time.Time); ok {
			tb, ok := b[i].(time.Time)
			if !ok || !ta.Equal(tb) {
				return false
			}
			continue
		}
		if fmt.Sprintf("%T %v", a[i], a[i]) != fmt.Sprintf("%T %v", b[i], b[i]) {
			return false
		}
	}
	return true
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
