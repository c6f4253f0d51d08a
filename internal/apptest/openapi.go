package apptest

import (
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"sigs.k8s.io/yaml"

	"github.com/gpuplane/gpuplane/api"
)

// Document is api/openapi.yaml, compiled to check real answers against: a
// test that calls the REST API can assert that what the server sent is what
// the document promises (status documented, body valid against the
// operation's schema, every field the schema requires present, no field it
// does not describe). Generated clients are built from that document, so a
// drift here breaks them.
type Document struct {
	routes    []docRoute
	responses map[string]any
	compiler  *jsonschema.Compiler
	mu        sync.Mutex
	schemas   map[string]*jsonschema.Schema
}

type docRoute struct {
	template string
	match    *regexp.Regexp
	ops      map[string]map[string]any // method -> operation
}

var (
	docOnce sync.Once
	doc     *Document
	docErr  error
)

// OpenAPI returns the compiled document (once per test binary).
func OpenAPI(t testing.TB) *Document {
	t.Helper()
	docOnce.Do(func() { doc, docErr = compileDocument(api.OpenAPI) })
	if docErr != nil {
		t.Fatalf("apptest: openapi document: %v", docErr)
	}
	return doc
}

func compileDocument(raw []byte) (*Document, error) {
	js, err := yaml.YAMLToJSON(raw)
	if err != nil {
		return nil, err
	}
	var d map[string]any
	if err := json.Unmarshal(js, &d); err != nil {
		return nil, err
	}
	// Responses must not carry fields the document does not describe: close
	// every object schema that lists its properties (free-form objects,
	// such as an audit snapshot, stay open).
	for _, s := range d["components"].(map[string]any)["schemas"].(map[string]any) {
		closeObjects(s)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource("https://gpuplane.test/openapi.json", d); err != nil {
		return nil, err
	}
	out := &Document{compiler: c, schemas: map[string]*jsonschema.Schema{},
		responses: d["components"].(map[string]any)["responses"].(map[string]any)}
	param := regexp.MustCompile(`\{[^}]+\}`)
	for p, ops := range d["paths"].(map[string]any) {
		var expr strings.Builder
		expr.WriteString("^")
		last := 0
		for _, m := range param.FindAllStringIndex(p, -1) {
			expr.WriteString(regexp.QuoteMeta(p[last:m[0]]) + `[^/:]+`)
			last = m[1]
		}
		expr.WriteString(regexp.QuoteMeta(p[last:]) + "$")
		r := docRoute{template: p, match: regexp.MustCompile(expr.String()), ops: map[string]map[string]any{}}
		for m, op := range ops.(map[string]any) {
			r.ops[strings.ToUpper(m)] = op.(map[string]any)
		}
		out.routes = append(out.routes, r)
	}
	// Literal segments win over parameters (/v1/requests:checkFit is not
	// /v1/requests/{request}): try the routes with fewer parameters first.
	sort.Slice(out.routes, func(i, j int) bool {
		return strings.Count(out.routes[i].template, "{") < strings.Count(out.routes[j].template, "{")
	})
	return out, nil
}

func closeObjects(v any) {
	switch x := v.(type) {
	case map[string]any:
		if _, ok := x["properties"]; ok {
			if _, set := x["additionalProperties"]; !set {
				x["additionalProperties"] = false
			}
		}
		for _, e := range x {
			closeObjects(e)
		}
	case []any:
		for _, e := range x {
			closeObjects(e)
		}
	}
}

// Check fails t unless the answer to method + path (query allowed) is
// documented: its status is among the operation's responses (or "default")
// and its body is valid against that response's schema.
func (d *Document) Check(t testing.TB, method, path string, r Response) {
	t.Helper()
	if err := d.check(method, path, r); err != nil {
		t.Errorf("%s %s -> %d does not match api/openapi.yaml: %v\nbody: %s", method, path, r.Status, err, r.Body)
	}
}

func (d *Document) check(method, path string, r Response) error {
	u, err := url.Parse(path)
	if err != nil {
		return err
	}
	var op map[string]any
	for _, rt := range d.routes {
		if rt.match.MatchString(u.Path) {
			if op = rt.ops[strings.ToUpper(method)]; op != nil {
				break
			}
		}
	}
	if op == nil {
		return fmt.Errorf("no operation for %s %s", method, u.Path)
	}
	responses := op["responses"].(map[string]any)
	resp, ok := responses[strconv.Itoa(r.Status)].(map[string]any)
	if !ok {
		if resp, ok = responses["default"].(map[string]any); !ok || r.Status < 400 {
			return fmt.Errorf("status %d is not documented for %s", r.Status, op["operationId"])
		}
	}
	if ref, ok := resp["$ref"].(string); ok {
		resp = d.resolveResponse(ref)
	}
	schemaRef := ""
	if content, ok := resp["content"].(map[string]any); ok {
		if s, ok := content["application/json"].(map[string]any)["schema"].(map[string]any); ok {
			schemaRef, _ = s["$ref"].(string)
			if schemaRef == "" && s["type"] == "object" && len(s) <= 2 {
				schemaRef = "#empty-object"
			}
		}
	}
	if schemaRef == "" {
		return fmt.Errorf("%s %d has no JSON schema", op["operationId"], r.Status)
	}
	var body any
	if err := json.Unmarshal(r.Body, &body); err != nil {
		return fmt.Errorf("body is not JSON: %w", err)
	}
	if schemaRef == "#empty-object" {
		if m, ok := body.(map[string]any); !ok || len(m) != 0 {
			return fmt.Errorf("want an empty object")
		}
		return nil
	}
	sch, err := d.schema(schemaRef)
	if err != nil {
		return err
	}
	return sch.Validate(body)
}

// CheckSchema fails t unless v (a decoded JSON value) is valid against the
// component schema name, e.g. "Team".
func (d *Document) CheckSchema(t testing.TB, name string, v any) {
	t.Helper()
	sch, err := d.schema("#/components/schemas/" + name)
	if err == nil {
		err = sch.Validate(v)
	}
	if err != nil {
		t.Errorf("not a valid %s: %v", name, err)
	}
}

func (d *Document) schema(ref string) (*jsonschema.Schema, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.schemas[ref]; ok {
		return s, nil
	}
	s, err := d.compiler.Compile("https://gpuplane.test/openapi.json" + ref)
	if err != nil {
		return nil, err
	}
	d.schemas[ref] = s
	return s, nil
}

func (d *Document) resolveResponse(ref string) map[string]any {
	r, _ := d.responses[strings.TrimPrefix(ref, "#/components/responses/")].(map[string]any)
	return r
}
