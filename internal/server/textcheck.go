package server

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/gpuplane/gpuplane/internal/errs"
)

// Text the API stores or compares must be UTF-8 without NUL: PostgreSQL
// refuses NUL in text (and invalid UTF-8 anywhere), and a refusal that deep
// is an internal error, not the caller's 400. One check runs before any
// handler: checkText walks every string of the request message (gRPC
// callers: the server interceptor, fields named by their proto names; REST
// callers: the gateway's in-process call before that, JSON names,
// inprocess.go), and
// checkRawRequest looks at the raw REST path and query first.

// checkText returns INVALID_ARGUMENT naming the first string field of m
// (nested messages, lists and maps included) that holds a NUL or invalid
// UTF-8, or nil.
func checkText(m proto.Message, jsonNames bool) error {
	if m == nil {
		return nil
	}
	field, why := badText(m.ProtoReflect(), "", jsonNames)
	if field == "" {
		return nil
	}
	return errs.InvalidField(field, "%s", why)
}

func badString(s string) string {
	switch {
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	case strings.IndexByte(s, 0) >= 0:
		return "must not contain NUL characters"
	}
	return ""
}

func badText(m protoreflect.Message, prefix string, jsonNames bool) (field, why string) {
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		name := string(fd.Name())
		if jsonNames {
			name = fd.JSONName()
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		switch {
		case fd.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				if fd.MapKey().Kind() == protoreflect.StringKind {
					if why = badString(k.String()); why != "" {
						field = path
						return false
					}
				}
				field, why = badValue(fd.MapValue(), mv, path+"["+strconv.Quote(k.String())+"]", jsonNames)
				return field == ""
			})
		case fd.IsList():
			l := v.List()
			for i := range l.Len() {
				if field, why = badValue(fd, l.Get(i), path+"["+strconv.Itoa(i)+"]", jsonNames); field != "" {
					break
				}
			}
		default:
			field, why = badValue(fd, v, path, jsonNames)
		}
		return field == ""
	})
	return field, why
}

func badValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string, jsonNames bool) (string, string) {
	switch fd.Kind() {
	case protoreflect.StringKind:
		if why := badString(v.String()); why != "" {
			return path, why
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return badText(v.Message(), path, jsonNames)
	}
	return "", ""
}

// checkRawRequest refuses a REST path or query that is not UTF-8 without
// NUL once percent-decoded, naming the query parameter (as sent) or "path".
func checkRawRequest(r *http.Request) error {
	if why := badString(r.URL.Path); why != "" {
		return errs.InvalidField("path", "%s (percent-decoded)", why)
	}
	if r.URL.RawQuery == "" {
		return nil
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		return errs.InvalidField("query", "is not a valid URL query (bad percent-encoding)")
	}
	for k, vals := range q {
		if why := badString(k); why != "" {
			return errs.InvalidField("query", "parameter names %s", why)
		}
		for _, v := range vals {
			if why := badString(v); why != "" {
				return errs.InvalidField(k, "%s (percent-decoded)", why)
			}
		}
	}
	return nil
}
