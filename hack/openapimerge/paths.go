package main

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"unicode"
)

// pathParam matches one {param} of an OpenAPI path.
var pathParam = regexp.MustCompile(`\{([^}]+)\}`)

// renamePathParams names every path parameter for the collection it
// follows: /v1/teams/{name}/virtualClusters/{name_1} becomes
// /v1/teams/{team}/virtualClusters/{virtualCluster}. The generator names
// them after the proto field the gateway rebuilds (name, parent,
// team.name), which described them as full resource names although the URL
// takes bare ids. The REST routes do not change: the gateway still matches
// the same segments and rebuilds the resource name from them. Paths that
// became equal (/v1/teams/{name} and /v1/teams/{team.name}) are merged.
func renamePathParams(paths obj) (obj, error) {
	out := obj{}
	for p, item := range paths {
		segs := strings.Split(p, "/")
		renames := map[string]string{}
		for i, seg := range segs {
			m := pathParam.FindStringSubmatchIndex(seg)
			if m == nil {
				continue
			}
			if i == 0 || pathParam.MatchString(segs[i-1]) {
				return nil, fmt.Errorf("%s: parameter %s does not follow a collection", p, seg)
			}
			old := seg[m[2]:m[3]]
			collection := strings.SplitN(segs[i-1], ":", 2)[0]
			renames[old] = singular(collection)
			segs[i] = seg[:m[0]] + "{" + renames[old] + "}" + seg[m[1]:]
		}
		np := strings.Join(segs, "/")
		for method, op := range item.(obj) {
			o := op.(obj)
			params, _ := o["parameters"].([]any)
			for _, pa := range params {
				param := pa.(obj)
				if param["in"] != "path" {
					continue
				}
				name := param["name"].(string)
				nn, ok := renames[name]
				if !ok {
					return nil, fmt.Errorf("%s %s: path parameter %s is not in the path", method, p, name)
				}
				param["name"] = nn
				param["description"] = idDescription(np, nn, param["description"])
				param["schema"] = obj{"type": "string"}
			}
		}
		if err := addPath(out, np, item.(obj)); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// singular is the parameter name for a collection segment: teams -> team,
// virtualClusters -> virtualCluster, approvalPolicies -> approvalPolicy.
func singular(collection string) string {
	switch {
	case strings.HasSuffix(collection, "ies"):
		return strings.TrimSuffix(collection, "ies") + "y"
	case strings.HasSuffix(collection, "s"):
		return strings.TrimSuffix(collection, "s")
	}
	return collection
}

// words splits a camelCase name for prose: virtualCluster -> virtual cluster.
func words(name string) string {
	var b strings.Builder
	for _, r := range name {
		if unicode.IsUpper(r) {
			b.WriteByte(' ')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// idDescription says what a path parameter holds: a bare id, not the
// resource name the generator's field comment talked about. The wildcard
// "-" (every team the caller can read) is kept when the field took it.
func idDescription(path, param string, fieldComment any) string {
	resource := path[:strings.Index(path, "{"+param+"}")+len(param)+2]
	resource = strings.TrimPrefix(resource, "/v1/")
	d := fmt.Sprintf("The %s's id, e.g. `%s`: the last segment of its resource name `%s`, not the whole name.",
		words(param), exampleID(param), resource)
	if c, _ := fieldComment.(string); strings.Contains(c, "/-") {
		d += fmt.Sprintf(" `-` stands for every %s the caller can read.", words(param))
	}
	return d
}

// exampleID is an id of the README walkthrough's demo for each collection.
func exampleID(param string) string {
	switch param {
	case "team":
		return "team-a"
	case "department":
		return "research"
	case "member":
		return "bob"
	case "virtualCluster":
		return "ml-dev"
	case "approvalPolicy":
		return "small-research"
	case "request":
		return "r3f9c2a7b1d0e4f68"
	}
	return "my-" + strings.ToLower(param)
}

// additionalBindingIDs names the operations of additional HTTP bindings,
// which the generator calls <Service>_<Method>_<n>. Every such binding must
// be listed here: a new one fails generation until it has a name.
var additionalBindingIDs = map[string]string{
	"RequestService_CheckFit_1": "CheckRequestFit",
}

var generatedID = regexp.MustCompile(`^[A-Za-z]+Service_([A-Za-z]+)(_\d+)?$`)

// renameOperations makes operation ids the RPC names (CreateRequest, not
// RequestService_CreateRequest): RPC names are unique across the API's
// services, and generated clients name their methods after them.
func renameOperations(paths obj) error {
	seen := map[string]string{}
	for _, p := range slices.Sorted(maps.Keys(paths)) {
		for method, op := range paths[p].(obj) {
			o := op.(obj)
			id, _ := o["operationId"].(string)
			m := generatedID.FindStringSubmatch(id)
			if m == nil {
				return fmt.Errorf("%s %s: unexpected operationId %q", method, p, id)
			}
			nid := m[1]
			if m[2] != "" {
				if nid = additionalBindingIDs[id]; nid == "" {
					return fmt.Errorf("%s %s: additional binding %s needs a name in additionalBindingIDs (hack/openapimerge/paths.go)", method, p, id)
				}
			}
			if prev, dup := seen[nid]; dup {
				return fmt.Errorf("operationId %s used by %s and %s %s", nid, prev, method, p)
			}
			seen[nid] = method + " " + p
			o["operationId"] = nid
		}
	}
	return nil
}
