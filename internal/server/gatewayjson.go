package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"
	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// restMarshaler is the REST gateway's JSON: lowerCamelCase names, and every
// scalar, enum and list emitted even when zero (fits: false, all three
// quota amounts, empty lists), so a client can render what it gets without
// knowing protobuf's defaults. Unset message fields (a virtual cluster's
// limit, a request's decideTime) and oneof members that are not chosen stay
// absent: null would contradict the document's schemas. The document
// (hack/openapimerge) marks exactly the always-present fields required.
//
// Bodies that do not decode are explained field by field (explainDecode)
// instead of with protojson's message.
type restMarshaler struct {
	runtime.JSONPb
}

func newRESTMarshaler() *restMarshaler {
	return &restMarshaler{runtime.JSONPb{
		MarshalOptions:   protojson.MarshalOptions{EmitDefaultValues: true},
		UnmarshalOptions: protojson.UnmarshalOptions{DiscardUnknown: false},
	}}
}

// NewDecoder keeps the raw body, so a decode error can be explained with
// the message's descriptor.
func (m *restMarshaler) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		var raw json.RawMessage
		if err := json.NewDecoder(r).Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				return err // an empty body; the gateway treats it as {}
			}
			return recordDecodeError(r, errs.FieldViolation{Field: "", Description: "the body is not valid JSON: " + err.Error()})
		}
		err := m.Unmarshal(raw, v)
		if err == nil {
			return nil
		}
		msg, ok := protoMessageOf(v)
		if !ok {
			return err
		}
		violations := explainDecode(raw, msg.ProtoReflect().Descriptor())
		if len(violations) == 0 {
			violations = []errs.FieldViolation{{Description: cleanProtojsonError(err)}}
		}
		return recordDecodeError(r, violations...)
	})
}

// protoMessageOf finds the message the gateway decodes into: v is a
// message, or a pointer to a message field (allocated by Unmarshal).
func protoMessageOf(v any) (proto.Message, bool) {
	if m, ok := v.(proto.Message); ok {
		return m, true
	}
	rv := reflect.ValueOf(v)
	for rv.Kind() == reflect.Pointer && !rv.IsNil() {
		if m, ok := rv.Interface().(proto.Message); ok {
			return m, true
		}
		rv = rv.Elem()
	}
	return nil, false
}

// decodeErrorBody carries what a failed decode found from the decoder (which
// sees only the body) to the error handler (which sees the request): the
// gateway turns the decoder's error into plain text in between. The handler
// chain puts it around every REST request's body (withDecodeErrors).
type decodeErrorBody struct {
	io.ReadCloser
	violations []errs.FieldViolation
}

func withDecodeErrors(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &decodeErrorBody{ReadCloser: r.Body}
		}
		next.ServeHTTP(w, r)
	})
}

func recordDecodeError(r io.Reader, violations ...errs.FieldViolation) error {
	if b, ok := r.(*decodeErrorBody); ok {
		b.violations = violations
	}
	var parts []string
	for _, v := range violations {
		parts = append(parts, strings.TrimPrefix(v.Field+": ", ": ")+v.Description)
	}
	return errors.New(strings.Join(parts, "; "))
}

// decodeViolations returns what the decoder recorded for r, with field
// paths prefixed by the request field the body fills (e.g. "request." for
// POST /v1/requests, nothing for a body of the whole request message).
func decodeViolations(ctx context.Context, r *http.Request) []errs.FieldViolation {
	b, ok := r.Body.(*decodeErrorBody)
	if !ok || len(b.violations) == 0 {
		return nil
	}
	prefix := ""
	if method, ok := runtime.RPCMethod(ctx); ok {
		prefix = bodyFieldOf(method)
	}
	out := make([]errs.FieldViolation, 0, len(b.violations))
	for _, v := range b.violations {
		switch {
		case prefix == "" && v.Field == "":
			v.Field = "body"
		case v.Field == "":
			v.Field = prefix
		case prefix != "":
			v.Field = prefix + "." + v.Field
		}
		out = append(out, v)
	}
	return out
}

// bodyFieldOf is the JSON name of the request field an RPC's HTTP body
// fills ("request" for CreateRequest), or "" when the body is the whole
// request message (body: "*").
func bodyFieldOf(fullMethod string) string {
	name := protoreflect.FullName(strings.ReplaceAll(strings.TrimPrefix(fullMethod, "/"), "/", "."))
	d, err := protoregistry.GlobalFiles.FindDescriptorByName(name)
	if err != nil {
		return ""
	}
	md, ok := d.(protoreflect.MethodDescriptor)
	if !ok {
		return ""
	}
	rule, _ := proto.GetExtension(md.Options(), annotations.E_Http).(*annotations.HttpRule)
	body := rule.GetBody()
	if body == "" || body == "*" {
		return ""
	}
	if f := md.Input().Fields().ByName(protoreflect.Name(body)); f != nil {
		return f.JSONName()
	}
	return errs.JSONFieldPath(body)
}

// unitHints say, for fields whose unit is easy to get wrong, what they take
// and where a quantity string goes instead.
var unitHints = map[protoreflect.FullName]string{
	"gpuplane.v1.Quota.cpu_millis":   `takes millicores as an integer (1000 = one CPU); for a quantity such as "16" or "500m" use cpu`,
	"gpuplane.v1.Quota.memory_bytes": `takes bytes as an integer; for a quantity such as "64Gi" use memory`,
}

// explainDecode walks a JSON document alongside the message it should
// decode into and names every value that does not fit, by JSON path (the
// names of the document, which protojson also accepts in proto form).
func explainDecode(raw []byte, md protoreflect.MessageDescriptor) []errs.FieldViolation {
	var v any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return []errs.FieldViolation{{Description: "the body is not valid JSON: " + err.Error()}}
	}
	var out []errs.FieldViolation
	explainMessage(&out, "", v, md)
	return out
}

func explainMessage(out *[]errs.FieldViolation, path string, v any, md protoreflect.MessageDescriptor) {
	if v == nil {
		return
	}
	if wkt, ok := wellKnownJSON(md.FullName()); ok {
		if msg := wkt(v); msg != "" {
			add(out, path, "%s", msg)
		}
		return
	}
	o, ok := v.(map[string]any)
	if !ok {
		add(out, path, "must be a JSON object (%s)", describeJSON(v))
		return
	}
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	oneofs := map[protoreflect.FullName]string{}
	for _, k := range keys {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(k))
		}
		p := join(path, k)
		if fd == nil {
			add(out, p, "unknown field; %s has: %s", md.Name(), fieldList(md))
			continue
		}
		if fd.JSONName() != k {
			p = join(path, fd.JSONName())
		}
		if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() && o[k] != nil {
			if other, dup := oneofs[od.FullName()]; dup {
				add(out, p, "only one of %s may be set (%s is set too)", oneofMembers(od), other)
				continue
			}
			oneofs[od.FullName()] = fd.JSONName()
		}
		explainField(out, p, o[k], fd)
	}
}

func explainField(out *[]errs.FieldViolation, path string, v any, fd protoreflect.FieldDescriptor) {
	if v == nil {
		return
	}
	switch {
	case fd.IsMap():
		o, ok := v.(map[string]any)
		if !ok {
			add(out, path, "must be a JSON object (%s)", describeJSON(v))
			return
		}
		for k, e := range o {
			explainValue(out, path+"["+strconv.Quote(k)+"]", e, fd.MapValue())
		}
	case fd.IsList():
		a, ok := v.([]any)
		if !ok {
			add(out, path, "must be a JSON array (%s)", describeJSON(v))
			return
		}
		for i, e := range a {
			explainValue(out, path+"["+strconv.Itoa(i)+"]", e, fd)
		}
	default:
		explainValue(out, path, v, fd)
	}
}

// explainValue checks one value against a field's kind, the way protojson
// reads it.
func explainValue(out *[]errs.FieldViolation, path string, v any, fd protoreflect.FieldDescriptor) {
	if v == nil {
		return
	}
	bad := func(want string) {
		msg := fmt.Sprintf("must be %s (%s)", want, describeJSON(v))
		if hint, ok := unitHints[fd.FullName()]; ok {
			msg = fmt.Sprintf("%s %s (%s)", fd.JSONName(), hint, describeJSON(v))
		}
		add(out, path, "%s", msg)
	}
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		explainMessage(out, path, v, fd.Message())
	case protoreflect.EnumKind:
		if fd.Enum().FullName() == "google.protobuf.NullValue" {
			return
		}
		s, ok := v.(string)
		if n, isNum := v.(json.Number); isNum {
			if _, err := strconv.ParseInt(n.String(), 10, 32); err == nil {
				return
			}
		}
		if !ok || fd.Enum().Values().ByName(protoreflect.Name(s)) == nil {
			bad("one of " + enumList(fd.Enum()))
		}
	case protoreflect.BoolKind:
		if _, ok := v.(bool); !ok {
			bad("true or false")
		}
	case protoreflect.StringKind:
		if _, ok := v.(string); !ok {
			bad("a string")
		}
	case protoreflect.BytesKind:
		if _, ok := v.(string); !ok {
			bad("a base64 string")
		}
	case protoreflect.FloatKind, protoreflect.DoubleKind:
		if !isNumber(v, func(s string) error { _, err := strconv.ParseFloat(s, 64); return err }) {
			bad("a number")
		}
	case protoreflect.Int32Kind, protoreflect.Sint32Kind, protoreflect.Sfixed32Kind:
		if !isNumber(v, func(s string) error { _, err := strconv.ParseInt(s, 10, 32); return err }) {
			bad("a 32-bit integer")
		}
	case protoreflect.Uint32Kind, protoreflect.Fixed32Kind:
		if !isNumber(v, func(s string) error { _, err := strconv.ParseUint(s, 10, 32); return err }) {
			bad("a non-negative 32-bit integer")
		}
	case protoreflect.Int64Kind, protoreflect.Sint64Kind, protoreflect.Sfixed64Kind:
		if !isNumber(v, func(s string) error { _, err := strconv.ParseInt(s, 10, 64); return err }) {
			bad("an integer (a JSON number or a string of digits)")
		}
	case protoreflect.Uint64Kind, protoreflect.Fixed64Kind:
		if !isNumber(v, func(s string) error { _, err := strconv.ParseUint(s, 10, 64); return err }) {
			bad("a non-negative integer (a JSON number or a string of digits)")
		}
	}
}

// isNumber reports whether v is a number protojson accepts for a numeric
// field: a JSON number or a string holding one, parsed by parse, or for an
// integer field an integral JSON number in exponent form ("1e3").
func isNumber(v any, parse func(string) error) bool {
	var s string
	switch x := v.(type) {
	case json.Number:
		s = x.String()
	case string:
		s = x
	default:
		return false
	}
	if parse(s) == nil {
		return true
	}
	f, err := strconv.ParseFloat(s, 64)
	return err == nil && f == math.Trunc(f) && parse(strconv.FormatFloat(f, 'f', -1, 64)) == nil
}

// wellKnownJSON checks the JSON forms of the well-known types the API
// uses; ok is false for other messages.
func wellKnownJSON(name protoreflect.FullName) (func(any) string, bool) {
	str := func(what string, check func(string) error) func(any) string {
		return func(v any) string {
			s, ok := v.(string)
			if !ok {
				return fmt.Sprintf("must be %s (%s)", what, describeJSON(v))
			}
			if check(s) != nil {
				return fmt.Sprintf("must be %s (got %q)", what, s)
			}
			return ""
		}
	}
	switch name {
	case "google.protobuf.Timestamp":
		return str("an RFC 3339 time such as \"2026-01-02T15:04:05Z\"", func(s string) error {
			return protojson.Unmarshal([]byte(strconv.Quote(s)), newMessage("google.protobuf.Timestamp"))
		}), true
	case "google.protobuf.Duration":
		return str("a duration in seconds such as \"1.5s\"", func(s string) error {
			return protojson.Unmarshal([]byte(strconv.Quote(s)), newMessage("google.protobuf.Duration"))
		}), true
	case "google.protobuf.FieldMask":
		return str("comma-separated field paths", func(string) error { return nil }), true
	case "google.protobuf.Struct":
		return func(v any) string {
			if _, ok := v.(map[string]any); !ok {
				return fmt.Sprintf("must be a JSON object (%s)", describeJSON(v))
			}
			return ""
		}, true
	case "google.protobuf.Value", "google.protobuf.ListValue", "google.protobuf.Any", "google.protobuf.Empty":
		return func(any) string { return "" }, true
	}
	return nil, false
}

func newMessage(name protoreflect.FullName) proto.Message {
	mt, err := protoregistry.GlobalTypes.FindMessageByName(name)
	if err != nil {
		panic(err) // linked in by the API's own descriptors
	}
	return mt.New().Interface()
}

func add(out *[]errs.FieldViolation, path, format string, args ...any) {
	*out = append(*out, errs.FieldViolation{Field: path, Description: fmt.Sprintf(format, args...)})
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func describeJSON(v any) string {
	switch x := v.(type) {
	case string:
		return "got " + strconv.Quote(x)
	case json.Number:
		return "got " + x.String()
	case bool:
		return "got " + strconv.FormatBool(x)
	case []any:
		return "got an array"
	case map[string]any:
		return "got an object"
	}
	return "got null"
}

func fieldList(md protoreflect.MessageDescriptor) string {
	var names []string
	for i := range md.Fields().Len() {
		names = append(names, md.Fields().Get(i).JSONName())
	}
	return strings.Join(names, ", ")
}

func enumList(ed protoreflect.EnumDescriptor) string {
	var names []string
	for i := range ed.Values().Len() {
		if v := ed.Values().Get(i); v.Number() != 0 {
			names = append(names, string(v.Name()))
		}
	}
	return strings.Join(names, ", ")
}

func oneofMembers(od protoreflect.OneofDescriptor) string {
	var names []string
	for i := range od.Fields().Len() {
		names = append(names, od.Fields().Get(i).JSONName())
	}
	return strings.Join(names, ", ")
}

// cleanProtojsonError words an error explainDecode found nothing for
// (rare: e.g. a duplicate key) without protojson's "proto:" prefix.
func cleanProtojsonError(err error) string {
	s := strings.TrimSpace(strings.TrimPrefix(err.Error(), "proto:"))
	s = strings.TrimPrefix(s, "syntax error ")
	return "the body does not decode: " + strings.ReplaceAll(s, "\u00a0", " ")
}
