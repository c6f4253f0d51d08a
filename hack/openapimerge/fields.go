package main

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"google.golang.org/genproto/googleapis/api/annotations"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	// The API's descriptors, with their field behavior.
	_ "github.com/gpuplane/gpuplane/api/gpuplane/v1"
)

const schemaRefPrefix = "#/components/schemas/"

// applyFieldBehavior rewrites every message schema's properties from the
// compiled descriptors:
//
//   - readOnly: OUTPUT_ONLY and IDENTIFIER fields (the identifier always
//     comes from the URL or a *Id query parameter over REST), in schemas a
//     request can carry; in schemas only responses use it would say nothing.
//   - writeOnly: INPUT_ONLY fields (Quota.cpu, Quota.memory).
//   - required: REQUIRED fields (a request must set them), and output-only
//     fields the server always sends: responses emit every scalar, enum and
//     list, zero values included, and every message field not marked
//     OPTIONAL; members of a oneof and proto3 optional fields are never
//     required. Fields of schemas only responses use count as output-only.
//   - a oneof is described, not encoded as a JSON Schema oneOf: generated
//     clients turn oneOf into union wrappers; the server refuses two members.
func applyFieldBehavior(paths, schemas obj) error {
	inRequests := reachable(schemas, requestRoots(paths))
	for name, s := range schemas {
		schema, ok := s.(obj)
		if !ok {
			continue
		}
		d, err := protoregistry.GlobalFiles.FindDescriptorByName(protoreflect.FullName(name))
		if err != nil {
			continue // google.rpc.Status, enums
		}
		md, ok := d.(protoreflect.MessageDescriptor)
		if !ok {
			continue
		}
		if err := messageSchema(schema, md, inRequests[name]); err != nil {
			return fmt.Errorf("schema %s: %w", name, err)
		}
	}
	return nil
}

func messageSchema(schema obj, md protoreflect.MessageDescriptor, inRequests bool) error {
	props, _ := schema["properties"].(obj)
	delete(schema, "oneOf")
	delete(schema, "allOf")
	var required []string
	fields := md.Fields()
	for i := range fields.Len() {
		f := fields.Get(i)
		name := f.JSONName()
		p, ok := props[name].(obj)
		if !ok {
			return fmt.Errorf("no property %s for field %s", name, f.Name())
		}
		fb := behaviors(f)
		outputOnly := slices.Contains(fb, annotations.FieldBehavior_OUTPUT_ONLY) || slices.Contains(fb, annotations.FieldBehavior_IDENTIFIER)
		p = unwrapRef(p)
		flags := obj{}
		if outputOnly && inRequests {
			flags["readOnly"] = true
		}
		if slices.Contains(fb, annotations.FieldBehavior_INPUT_ONLY) {
			flags["writeOnly"] = true
		}
		props[name] = withFlags(p, flags)

		alwaysSent := (outputOnly || !inRequests) &&
			f.ContainingOneof() == nil && !slices.Contains(fb, annotations.FieldBehavior_OPTIONAL) &&
			!slices.Contains(fb, annotations.FieldBehavior_INPUT_ONLY)
		if slices.Contains(fb, annotations.FieldBehavior_REQUIRED) || alwaysSent {
			required = append(required, name)
		}
	}
	slices.Sort(required)
	if len(required) > 0 {
		schema["required"] = required
	} else {
		delete(schema, "required")
	}
	oneofs := md.Oneofs()
	for i := range oneofs.Len() {
		o := oneofs.Get(i)
		if o.IsSynthetic() {
			continue
		}
		var members []string
		for j := range o.Fields().Len() {
			members = append(members, "`"+o.Fields().Get(j).JSONName()+"`")
		}
		note := fmt.Sprintf("Exactly one of %s is set (a oneof).", strings.Join(members, ", "))
		if desc, _ := schema["description"].(string); desc != "" {
			schema["description"] = desc + "\n\n" + note
		} else {
			schema["description"] = note
		}
	}
	return nil
}

func behaviors(f protoreflect.FieldDescriptor) []annotations.FieldBehavior {
	fb, _ := proto.GetExtension(f.Options(), annotations.E_FieldBehavior).([]annotations.FieldBehavior)
	return fb
}

// unwrapRef undoes the generator's allOf wrapper around a $ref (which it
// uses to carry readOnly) and drops the flags this tool decides.
func unwrapRef(p obj) obj {
	if all, ok := p["allOf"].([]any); ok && len(all) == 1 {
		if inner, ok := all[0].(obj); ok && inner["$ref"] != nil {
			out := obj{"$ref": inner["$ref"]}
			if d, ok := p["description"]; ok {
				out["description"] = d
			}
			p = out
		}
	}
	delete(p, "readOnly")
	delete(p, "writeOnly")
	return p
}

// withFlags sets readOnly/writeOnly on a property. JSON Schema ignores
// keywords beside $ref in some tools, so a $ref with flags is wrapped in
// allOf, as the generator does.
func withFlags(p, flags obj) obj {
	if len(flags) == 0 {
		return p
	}
	if ref, ok := p["$ref"]; ok {
		out := obj{"allOf": []any{obj{"$ref": ref}}}
		if d, ok := p["description"]; ok {
			out["description"] = d
		}
		p = out
	}
	for k, v := range flags {
		p[k] = v
	}
	return p
}

// requestRoots are the schemas request bodies and parameters name directly.
func requestRoots(paths obj) []string {
	var roots []string
	for _, item := range paths {
		for _, op := range item.(obj) {
			o, ok := op.(obj)
			if !ok {
				continue
			}
			if rb, ok := o["requestBody"]; ok {
				roots = append(roots, refsIn(rb)...)
			}
			if ps, ok := o["parameters"]; ok {
				roots = append(roots, refsIn(ps)...)
			}
		}
	}
	return roots
}

// reachable is the set of schema names reachable from roots through $refs.
func reachable(schemas obj, roots []string) map[string]bool {
	seen := map[string]bool{}
	for len(roots) > 0 {
		n := roots[len(roots)-1]
		roots = roots[:len(roots)-1]
		if seen[n] {
			continue
		}
		seen[n] = true
		roots = append(roots, refsIn(schemas[n])...)
	}
	return seen
}

// refsIn lists the schema names v refers to, at any depth.
func refsIn(v any) []string {
	var out []string
	switch x := v.(type) {
	case obj:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "$ref" && strings.HasPrefix(s, schemaRefPrefix) {
				out = append(out, strings.TrimPrefix(s, schemaRefPrefix))
				continue
			}
			out = append(out, refsIn(e)...)
		}
	case []any:
		for _, e := range x {
			out = append(out, refsIn(e)...)
		}
	}
	return out
}

// snakeWord matches a snake_case identifier in prose.
var snakeWord = regexp.MustCompile(`\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b`)

// jsonNamesInProse rewrites the proto field names (snake_case) that the
// proto comments mention into their JSON names in every description and
// summary under v: REST callers see camelCase everywhere. Only names of
// fields of the API's messages change; CEL variables such as gpu_delta
// stay.
func jsonNamesInProse(v any, fields map[string]string) any {
	switch x := v.(type) {
	case obj:
		for k, e := range x {
			if s, ok := e.(string); ok && (k == "description" || k == "summary") {
				x[k] = snakeWord.ReplaceAllStringFunc(s, func(w string) string {
					if j, ok := fields[w]; ok {
						return j
					}
					return w
				})
				continue
			}
			x[k] = jsonNamesInProse(e, fields)
		}
	case []any:
		for i, e := range x {
			x[i] = jsonNamesInProse(e, fields)
		}
	}
	return v
}

// apiFieldNames maps every snake_case field name of the API's messages to
// its JSON name.
func apiFieldNames() map[string]string {
	out := map[string]string{}
	var walk func(protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			m := ms.Get(i)
			for j := range m.Fields().Len() {
				f := m.Fields().Get(j)
				if strings.Contains(string(f.Name()), "_") {
					out[string(f.Name())] = f.JSONName()
				}
			}
			walk(m.Messages())
		}
	}
	protoregistry.GlobalFiles.RangeFilesByPackage("gpuplane.v1", func(fd protoreflect.FileDescriptor) bool {
		walk(fd.Messages())
		return true
	})
	return out
}
