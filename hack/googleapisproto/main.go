// Command googleapisproto writes .proto sources for googleapis files the
// grpc-gateway v1.16.0 copy in the module cache lacks (today only
// google/api/field_behavior.proto), rendered from the descriptors compiled
// into google.golang.org/genproto, a module the build already depends on.
// The output goes to the git-ignored third_party/googleapis (see
// hack/googleapis.sh); nothing upstream is committed.
//
// The renderer handles what such annotation files contain: enums and
// extensions of descriptor options. Anything else fails, so a change
// upstream is noticed rather than silently dropped.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/reflect/protoreflect"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: googleapisproto <googleapis dir>")
		os.Exit(2)
	}
	for _, fd := range []protoreflect.FileDescriptor{annotations.File_google_api_field_behavior_proto} {
		src, err := render(fd)
		if err == nil {
			out := filepath.Join(os.Args[1], fd.Path())
			if err = os.MkdirAll(filepath.Dir(out), 0o755); err == nil {
				err = os.WriteFile(out, []byte(src), 0o644)
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "googleapisproto: %s: %v\n", fd.Path(), err)
			os.Exit(1)
		}
	}
}

func render(fd protoreflect.FileDescriptor) (string, error) {
	if fd.Messages().Len() > 0 || fd.Services().Len() > 0 {
		return "", fmt.Errorf("has messages or services; extend the renderer")
	}
	var b strings.Builder
	fmt.Fprintf(&b, "// Rendered by hack/googleapisproto from the descriptor in google.golang.org/genproto. DO NOT EDIT.\n")
	fmt.Fprintf(&b, "syntax = %q;\n\npackage %s;\n\n", fd.Syntax().String(), fd.Package())
	for i := range fd.Imports().Len() {
		fmt.Fprintf(&b, "import %q;\n", fd.Imports().Get(i).Path())
	}
	fmt.Fprintf(&b, "\noption go_package = \"google.golang.org/genproto/googleapis/api/annotations;annotations\";\n\n")
	for i := range fd.Extensions().Len() {
		x := fd.Extensions().Get(i)
		if x.Kind() != protoreflect.EnumKind {
			return "", fmt.Errorf("extension %s is not an enum", x.FullName())
		}
		label := ""
		if x.Cardinality() == protoreflect.Repeated {
			label = "repeated "
		}
		opts := ""
		if x.Cardinality() == protoreflect.Repeated && !x.IsPacked() {
			opts = " [packed = false]"
		}
		fmt.Fprintf(&b, "extend %s {\n  %s.%s %s = %d%s;\n}\n\n",
			"."+x.ContainingMessage().FullName(), label, x.Enum().FullName(), x.Name(), x.Number(), opts)
	}
	for i := range fd.Enums().Len() {
		e := fd.Enums().Get(i)
		fmt.Fprintf(&b, "enum %s {\n", e.Name())
		for j := range e.Values().Len() {
			v := e.Values().Get(j)
			fmt.Fprintf(&b, "  %s = %d;\n", v.Name(), v.Number())
		}
		b.WriteString("}\n\n")
	}
	return b.String(), nil
}
