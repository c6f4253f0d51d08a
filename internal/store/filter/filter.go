// Package filter compiles a small, strict subset of AIP-160 list filters into
// a parameterized SQL WHERE fragment.
//
// Supported: `field op value (AND field op value)*`. Anything richer (OR, NOT,
// parentheses, functions, the ':' has-operator, implicit AND) is rejected with
// an INVALID_FILTER error instead of being half-understood, because a filter
// that silently means something else returns the wrong rows.
//
// Values only ever travel as query arguments; the generated SQL contains
// nothing but schema Column strings, placeholders, operators and keywords.
//
// Comparisons follow SQL NULL semantics: a NULL column matches neither = nor
// !=. Where that matters, make Column an expression such as
// "COALESCE(t.x, 'none')" (which no index on t.x serves). UUID fields are
// the exception: their != is IS DISTINCT FROM, so a NULL matches it.
package filter

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// MaxLength is the longest accepted filter, in bytes. It bounds parse work and
// the number of query arguments a caller can make us send.
const MaxLength = 2048

// Type is the type of a filterable field; it decides which operators and
// value forms are accepted and the Go type of the query argument.
type Type int

// Field types.
const (
	String    Type = iota // arg is a string
	Enum                  // arg is a string from Field.Enum
	Timestamp             // arg is a time.Time; also allows < <= > >=
	Bool                  // arg is a bool
	// UUID: the value is a UUID in its canonical form (8-4-4-4-12 hex
	// digits), sent as text and cast to uuid, so that = compares the
	// column as it is and an index on it serves. A NULL column is no
	// UUID: it matches != (IS DISTINCT FROM), not =.
	UUID
)

func (t Type) String() string {
	switch t {
	case String:
		return "string"
	case Enum:
		return "enum"
	case Timestamp:
		return "timestamp"
	case Bool:
		return "bool"
	case UUID:
		return "uuid"
	}
	return "Type(" + strconv.Itoa(int(t)) + ")"
}

// Field describes one filterable field.
type Field struct {
	// Column is a trusted SQL expression written by us, e.g. "t.department_id".
	// It is copied into the SQL verbatim.
	Column string
	Type   Type
	// Enum lists the allowed values of an Enum field (case-sensitive).
	Enum []string
	// Strip, when set, is a resource-name prefix removed from the value before
	// comparison, e.g. "departments/" so `department = "departments/research"`
	// compares department_id = 'research'. A value without the prefix is an
	// error that says the expected form.
	Strip string
	// Prefix allows a trailing '*' on String values: `resource = "teams/a*"`
	// becomes Column LIKE 'teams/a%' with LIKE metacharacters in the value
	// escaped. Ignored for other types.
	Prefix bool
}

// Schema maps a field's proto name (snake_case) to its Field; filters may
// name it so or by its JSON name (lowerCamelCase).
type Schema map[string]Field

// Compile returns a SQL boolean expression using placeholders $N starting at
// firstArg (so callers can append it to their own args), and the args.
// An empty/blank filter returns "TRUE", nil, nil. Several terms are wrapped in
// parentheses so the result composes safely with any surrounding operator.
//
// User errors are *errs.Error with KindInvalidArgument, ReasonInvalidFilter
// and one violation on field "filter". Positions in messages are 1-based
// character offsets into expr.
func Compile(expr string, schema Schema, firstArg int) (sql string, args []any, err error) {
	if len(expr) > MaxLength {
		return "", nil, invalid("filter is %d bytes long; the maximum is %d", len(expr), MaxLength)
	}
	if strings.Trim(expr, spaceChars) == "" {
		return "TRUE", nil, nil
	}
	if firstArg < 1 {
		return "", nil, errs.New(errs.KindUnknown, errs.ReasonInternal, "filter: firstArg must be >= 1, got %d", firstArg)
	}
	// PostgreSQL text rejects both; catching them here keeps a bad filter a
	// client error instead of a failed query.
	if !utf8.ValidString(expr) {
		return "", nil, invalid("filter is not valid UTF-8")
	}
	if i := strings.IndexByte(expr, 0); i >= 0 {
		return "", nil, invalid("NUL character at position %d is not allowed", position(expr, i))
	}

	p := &parser{src: expr, toks: lex(expr), schema: schema, next: firstArg}
	terms, err := p.parse()
	if err != nil {
		return "", nil, err
	}
	if len(terms) == 1 {
		return terms[0], p.args, nil
	}
	return "(" + strings.Join(terms, " AND ") + ")", p.args, nil
}

const spaceChars = " \t\r\n"

const onlyAND = "only AND of field comparisons is supported"

func invalid(format string, args ...any) error {
	e := errs.New(errs.KindInvalidArgument, errs.ReasonInvalidFilter, "invalid filter")
	var v errs.Violations
	v.Add("filter", format, args...)
	e.Violations = v
	return e
}

// position converts a byte offset into the 1-based character position users
// see in their editor.
func position(src string, off int) int {
	return utf8.RuneCountInString(src[:off]) + 1
}

type tokKind int

const (
	tEOF    tokKind = iota
	tWord           // bare token: field name, keyword or unquoted value
	tString         // double-quoted string; text is the decoded value
	tOp             // = != < <= > >=
	tLParen
	tRParen
	tErr // lexing failed here; err says why
)

type token struct {
	kind tokKind
	text string
	pos  int // byte offset of the token's first character
	end  int // byte offset just past the token
	err  error
}

func isBare(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '_' || c == '-' || c == '.' || c == ':' || c == '/'
}

// lex tokenizes src. A lexing error becomes a final tErr token rather than
// failing outright, so that earlier, more meaningful errors (an unsupported
// function call before the ',' in its argument list) are reported first.
func lex(src string) []token {
	toks, off, err := lexTokens(src)
	if err != nil {
		return append(toks, token{kind: tErr, pos: off, end: off, err: err})
	}
	return append(toks, token{kind: tEOF, pos: len(src), end: len(src)})
}

func lexTokens(src string) ([]token, int, error) {
	var toks []token
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case strings.IndexByte(spaceChars, c) >= 0:
			i++
		case isBare(c):
			j := i + 1
			for j < len(src) && isBare(src[j]) {
				j++
			}
			toks = append(toks, token{kind: tWord, text: src[i:j], pos: i, end: j})
			i = j
		case c == '"':
			s, end, err := lexString(src, i)
			if err != nil {
				return toks, i, err
			}
			toks = append(toks, token{kind: tString, text: s, pos: i, end: end})
			i = end
		case c == '=':
			toks = append(toks, token{kind: tOp, text: "=", pos: i, end: i + 1})
			i++
		case c == '<' || c == '>' || c == '!':
			switch {
			case i+1 < len(src) && src[i+1] == '=':
				toks = append(toks, token{kind: tOp, text: src[i : i+2], pos: i, end: i + 2})
				i += 2
			case c == '!':
				return toks, i, invalid(`unexpected "!" at position %d; the not-equal operator is "!="`, position(src, i))
			default:
				toks = append(toks, token{kind: tOp, text: src[i : i+1], pos: i, end: i + 1})
				i++
			}
		case c == '(':
			toks = append(toks, token{kind: tLParen, text: "(", pos: i, end: i + 1})
			i++
		case c == ')':
			toks = append(toks, token{kind: tRParen, text: ")", pos: i, end: i + 1})
			i++
		default:
			r, _ := utf8.DecodeRuneInString(src[i:])
			return toks, i, invalid("unexpected character %q at position %d; values with characters other than letters, digits and _ - . : / must be double-quoted",
				r, position(src, i))
		}
	}
	return toks, 0, nil
}

// lexString decodes the quoted string starting at src[start] == '"' and
// returns it with the offset just past the closing quote.
func lexString(src string, start int) (string, int, error) {
	var b strings.Builder
	for i := start + 1; i < len(src); {
		switch c := src[i]; c {
		case '"':
			return b.String(), i + 1, nil
		case '\\':
			if i+1 >= len(src) {
				return "", 0, invalid("unterminated string starting at position %d", position(src, start))
			}
			if n := src[i+1]; n != '"' && n != '\\' {
				r, _ := utf8.DecodeRuneInString(src[i+1:])
				return "", 0, invalid(`invalid escape "\%c" at position %d; only \" and \\ are allowed in strings`,
					r, position(src, i))
			}
			b.WriteByte(src[i+1])
			i += 2
		default:
			b.WriteByte(c)
			i++
		}
	}
	return "", 0, invalid("unterminated string starting at position %d", position(src, start))
}

type parser struct {
	src    string
	toks   []token
	i      int
	schema Schema
	next   int // number of the next placeholder
	args   []any
}

func (p *parser) peek() token { return p.toks[p.i] }

// describe renders a token for "unexpected X" messages.
func describe(t token) string {
	switch t.kind {
	case tEOF:
		return "end of filter"
	case tString:
		return strconv.Quote(t.text) + " (string)"
	}
	return strconv.Quote(t.text)
}

func (p *parser) unexpected(t token, want string) error {
	if t.kind == tErr {
		return t.err
	}
	if t.kind == tEOF {
		return invalid("unexpected end of filter at position %d; expected %s", position(p.src, t.pos), want)
	}
	return invalid("unexpected %s at position %d; expected %s", describe(t), position(p.src, t.pos), want)
}

func (p *parser) unsupported(what string, t token) error {
	return invalid("%s at position %d is not supported: %s", what, position(p.src, t.pos), onlyAND)
}

func (p *parser) hasOperator(off int) error {
	return invalid(`the ":" (has) operator at position %d is not supported; use "=", e.g. state = PENDING`, position(p.src, off))
}

func (p *parser) parse() ([]string, error) {
	var terms []string
	for {
		t, err := p.term()
		if err != nil {
			return nil, err
		}
		terms = append(terms, t)

		switch t := p.peek(); {
		case t.kind == tEOF:
			return terms, nil
		case t.kind == tWord && t.text == "AND":
			p.i++
		case t.kind == tWord && (t.text == "OR" || t.text == "NOT"):
			return nil, p.unsupported(t.text, t)
		case t.kind == tLParen || t.kind == tRParen:
			return nil, p.unsupported("parenthesis", t)
		case t.kind == tWord && (strings.EqualFold(t.text, "AND") || strings.EqualFold(t.text, "OR")):
			return nil, p.unexpected(t, "AND or end of filter (keywords are upper case)")
		default:
			return nil, p.unexpected(t, "AND or end of filter")
		}
	}
}

func (p *parser) term() (string, error) {
	ft := p.peek()
	switch {
	case ft.kind == tWord && ft.text == "NOT":
		return "", p.unsupported("NOT", ft)
	case ft.kind == tWord && strings.HasPrefix(ft.text, "-"):
		return "", p.unsupported(`negation "-"`, ft)
	case ft.kind == tLParen || ft.kind == tRParen:
		return "", p.unsupported("parenthesis", ft)
	case ft.kind == tWord && (ft.text == "AND" || ft.text == "OR"):
		return "", p.unexpected(ft, "a field name")
	case ft.kind != tWord:
		return "", p.unexpected(ft, "a field name")
	}
	p.i++
	if k := strings.IndexByte(ft.text, ':'); k >= 0 {
		return "", p.hasOperator(ft.pos + k)
	}

	ot := p.peek()
	switch {
	case ot.kind == tOp:
		p.i++
	case ot.kind == tLParen:
		return "", p.unsupported("function call", ft)
	case ot.kind == tWord && strings.HasPrefix(ot.text, ":"):
		return "", p.hasOperator(ot.pos)
	default:
		return "", p.unexpected(ot, fmt.Sprintf("an operator (=, !=, <, <=, >, >=) after %q", ft.text))
	}

	name := ft.text
	f, ok := p.schema[name]
	if !ok {
		// REST callers see JSON names (isolationTier); the schema has the
		// proto names (isolation_tier). Both are accepted.
		name = errs.ProtoFieldPath(name)
		if f, ok = p.schema[name]; !ok {
			return "", p.unknownField(ft)
		}
	}
	op := ot.text
	if op != "=" && op != "!=" && f.Type != Timestamp {
		return "", invalid("operator %q at position %d is not supported for %s field %q; use = or !=",
			op, position(p.src, ot.pos), f.Type, name)
	}

	vt := p.peek()
	switch {
	case vt.kind == tString:
	case vt.kind == tWord && (vt.text == "AND" || vt.text == "OR" || vt.text == "NOT"):
		return "", p.unexpected(vt, fmt.Sprintf("a value for %q (double-quote it to use %s literally)", name, vt.text))
	case vt.kind == tWord:
	case vt.kind == tLParen:
		return "", p.unsupported("parenthesis", vt)
	case vt.kind == tEOF:
		return "", invalid("missing value for field %q at position %d (end of filter)", name, position(p.src, vt.pos))
	default:
		return "", p.unexpected(vt, fmt.Sprintf("a value for %q", name))
	}
	p.i++
	// A bad character glued to the value (2026-01-01T00:00:00+02:00) is the
	// real problem; complaining about the truncated value would mislead.
	if n := p.peek(); n.kind == tErr && n.pos == vt.end {
		return "", n.err
	}
	return p.compare(name, f, op, vt)
}

func (p *parser) unknownField(t token) error {
	names := make([]string, 0, len(p.schema))
	for n := range p.schema {
		names = append(names, n)
	}
	if len(names) == 0 {
		return invalid("unknown field %q at position %d; this list cannot be filtered", t.text, position(p.src, t.pos))
	}
	sort.Strings(names)
	return invalid("unknown field %q at position %d; allowed fields: %s",
		t.text, position(p.src, t.pos), strings.Join(names, ", "))
}

var sqlOps = map[string]string{"=": "=", "!=": "<>", "<": "<", "<=": "<=", ">": ">", ">=": ">="}

func (p *parser) placeholder(arg any) string {
	p.args = append(p.args, arg)
	s := "$" + strconv.Itoa(p.next)
	p.next++
	return s
}

// compare builds the SQL for one comparison whose value token is vt.
func (p *parser) compare(name string, f Field, op string, vt token) (string, error) {
	pos := position(p.src, vt.pos)
	v := vt.text
	if v == "" {
		return "", invalid("empty value for field %q at position %d", name, pos)
	}
	if f.Strip != "" {
		rest, ok := strings.CutPrefix(v, f.Strip)
		if !ok {
			return "", invalid("value %q for field %q at position %d must have the form %q",
				v, name, pos, f.Strip+"{id}")
		}
		if rest == "" {
			return "", invalid("empty value for field %q at position %d: nothing after %q", name, pos, f.Strip)
		}
		v = rest
	}

	switch f.Type {
	case String:
		star := strings.IndexByte(v, '*')
		switch {
		case star < 0 || (!f.Prefix && star < len(v)-1):
			// Without Prefix a '*' inside the value is just a character; only
			// a trailing one looks like a wildcard the user expects to work.
			return f.Column + " " + sqlOps[op] + " " + p.placeholder(v), nil
		case !f.Prefix:
			return "", invalid("field %q does not support prefix matching with a trailing '*' (position %d)", name, pos)
		case star < len(v)-1:
			return "", invalid("'*' in the value for field %q at position %d is only allowed as the last character (prefix match)", name, pos)
		}
		like := " LIKE "
		if op == "!=" {
			like = " NOT LIKE "
		}
		return f.Column + like + p.placeholder(likeEscaper.Replace(v[:len(v)-1])+"%") + ` ESCAPE '\'`, nil
	case Enum:
		if !slices.Contains(f.Enum, v) {
			return "", invalid("invalid value %q for field %q at position %d; allowed values: %s",
				v, name, pos, strings.Join(f.Enum, ", "))
		}
		return f.Column + " " + sqlOps[op] + " " + p.placeholder(v), nil
	case Timestamp:
		ts, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return "", invalid(`invalid timestamp %q for field %q at position %d; use RFC 3339, e.g. "2026-01-01T00:00:00Z"`,
				v, name, pos)
		}
		return f.Column + " " + sqlOps[op] + " " + p.placeholder(ts), nil
	case Bool:
		if v != "true" && v != "false" {
			return "", invalid("invalid value %q for field %q at position %d; allowed values: true, false", v, name, pos)
		}
		return f.Column + " " + sqlOps[op] + " " + p.placeholder(v == "true"), nil
	case UUID:
		if !isUUID(v) {
			return "", invalid(`invalid UUID %q for field %q at position %d; use the 8-4-4-4-12 hex form, e.g. "4b1f2c8e-9d3a-4e5f-8a7b-6c5d4e3f2a1b"`,
				v, name, pos)
		}
		cmp := " = "
		if op == "!=" {
			cmp = " IS DISTINCT FROM "
		}
		return f.Column + cmp + p.placeholder(strings.ToLower(v)) + "::uuid", nil
	}
	return "", errs.New(errs.KindUnknown, errs.ReasonInternal, "filter: field %q has unsupported type %s", name, f.Type)
}

// isUUID reports whether v is a UUID in its canonical text form (uuid
// also takes the braced, urn: and undashed forms, which are 38, 45 and 32
// characters long).
func isUUID(v string) bool { return len(v) == 36 && uuid.Validate(v) == nil }

// likeEscaper makes a string match literally under LIKE ... ESCAPE '\'.
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)
