package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// nameBodies gives request bodies names clients can use:
//
//   - a custom method's body (body: "*" in the HTTP rule, e.g. :approve) is
//     inline in the generator's output; it becomes the schema
//     <OperationId>Body (ApproveRequestBody);
//   - a PATCH body is the resource, whose create-only requirements
//     (Team.department, ApprovalPolicy.expression) do not hold for an
//     update: such a body becomes <Resource>Update, the same properties with
//     nothing required (the fields present, or updateMask, say what changes).
func nameBodies(paths, schemas obj) error {
	for _, p := range slices.Sorted(maps.Keys(paths)) {
		for method, op := range paths[p].(obj) {
			o := op.(obj)
			rb, ok := o["requestBody"].(obj)
			if !ok {
				continue
			}
			media := rb["content"].(obj)["application/json"].(obj)
			schema := media["schema"].(obj)
			ref, isRef := schema["$ref"].(string)
			switch {
			case !isRef:
				name := o["operationId"].(string) + "Body"
				if _, dup := schemas[name]; dup {
					return fmt.Errorf("%s %s: schema %s exists", method, p, name)
				}
				schema["description"] = fmt.Sprintf("The body of %s: the request's fields that are not in the path.", o["operationId"])
				schemas[name] = schema
				media["schema"] = obj{"$ref": schemaRefPrefix + name}
			case method == "patch":
				base := strings.TrimPrefix(ref, schemaRefPrefix)
				if !writableRequired(schemas[base].(obj)) {
					continue
				}
				short := base[strings.LastIndex(base, ".")+1:]
				name := short + "Update"
				if _, done := schemas[name]; !done {
					schemas[name] = updateSchema(schemas[base].(obj), short)
				}
				media["schema"] = obj{"$ref": schemaRefPrefix + name}
			}
		}
	}
	return nil
}

// writableRequired reports whether schema requires a field a client may
// write (not readOnly).
func writableRequired(schema obj) bool {
	props, _ := schema["properties"].(obj)
	req, _ := schema["required"].([]string)
	for _, r := range req {
		if p, ok := props[r].(obj); ok && p["readOnly"] != true {
			return true
		}
	}
	return false
}

func updateSchema(base obj, short string) obj {
	out := obj{}
	for k, v := range base {
		if k != "required" {
			out[k] = v
		}
	}
	out["description"] = fmt.Sprintf("A %s as the body of an update (PATCH): every field is optional; the fields present, "+
		"or the updateMask query parameter, say what changes.", short)
	return out
}
