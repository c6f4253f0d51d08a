package main

import (
	"fmt"
	"strings"
)

// shortSchemaNames maps the generator's component names (gpuplane.v1.Team,
// gpuplane.v1.Request.State, google.rpc.Status) to short, stable ones
// (Team, RequestState, Status): the package is the same for every schema,
// and dotted names become awkward identifiers in generated clients. A List
// RPC's response is one page of the list (ListTeamsPage, not
// ListTeamsResponse): generators name their own per-operation response
// wrappers <operationId>Response (oapi-codegen does), and the proto's name
// collides with them. Two schemas that would get one name are an error.
func shortSchemaNames(schemas obj) (map[string]string, error) {
	renames := map[string]string{}
	taken := map[string]string{}
	for name := range schemas {
		short := name
		for _, pkg := range []string{"gpuplane.v1.", "google.rpc."} {
			if rest, ok := strings.CutPrefix(name, pkg); ok {
				short = strings.ReplaceAll(rest, ".", "")
			}
		}
		if strings.HasPrefix(short, "List") && strings.HasSuffix(short, "Response") {
			short = strings.TrimSuffix(short, "Response") + "Page"
		}
		if prev, dup := taken[short]; dup {
			return nil, fmt.Errorf("schemas %s and %s would both be named %s", prev, name, short)
		}
		taken[short] = name
		renames[name] = short
	}
	return renames, nil
}

func renameSchemas(schemas obj, renames map[string]string) obj {
	out := obj{}
	for name, s := range schemas {
		out[renames[name]] = rewriteRefs(s, renames)
	}
	return out
}

// rewriteRefs replaces every schema $ref under v according to renames.
func rewriteRefs(v any, renames map[string]string) any {
	switch x := v.(type) {
	case obj:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "$ref" && strings.HasPrefix(s, schemaRefPrefix) {
				if n, ok := renames[strings.TrimPrefix(s, schemaRefPrefix)]; ok {
					x[k] = schemaRefPrefix + n
				}
				continue
			}
			x[k] = rewriteRefs(e, renames)
		}
	case []any:
		for i, e := range x {
			x[i] = rewriteRefs(e, renames)
		}
	}
	return v
}
