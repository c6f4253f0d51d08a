// Package charttest renders gpuplane's Helm chart (deploy/chart) with the
// Helm SDK, the way `helm template` would, and hands back the objects. Its
// own tests lint the chart, check values.schema.json and pod security, and
// apply every rendered object to a real API server with server-side dry-run;
// internal/rbacproof reads the worker's ClusterRole from here, so the RBAC
// proof always tests the chart itself rather than a copy.
package charttest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
)

// Dir is the chart directory, found relative to this source file so that it
// works from any package's tests.
func Dir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		panic("charttest: cannot locate source file")
	}
	return filepath.Join(filepath.Dir(file), "..", "chart")
}

// Load parses the chart.
func Load() (*chart.Chart, error) {
	ch, err := loader.Load(Dir())
	if err != nil {
		return nil, fmt.Errorf("charttest: load chart: %w", err)
	}
	return ch, nil
}

// Options say how to render.
type Options struct {
	// ReleaseName defaults to "gpuplane", Namespace to "gpuplane-system".
	ReleaseName, Namespace string
	// Values override the chart's values.yaml (nil: defaults only). The
	// one value without a default, database.existingSecret, is
	// "gpuplane-database" unless Values sets it (to "" to see the error).
	Values map[string]any
	// APIVersions are served by the pretend cluster on top of Helm's
	// built-in set, e.g. "monitoring.coreos.com/v1/ServiceMonitor".
	APIVersions []string
	// KubeVersion of the pretend cluster; default "v1.37.2".
	KubeVersion string
	// IsUpgrade renders as for `helm upgrade`.
	IsUpgrade bool
}

func (o Options) withDefaults() Options {
	if o.ReleaseName == "" {
		o.ReleaseName = "gpuplane"
	}
	if o.Namespace == "" {
		o.Namespace = "gpuplane-system"
	}
	if o.KubeVersion == "" {
		o.KubeVersion = "v1.37.2"
	}
	if db, _ := o.Values["database"].(map[string]any); db == nil || db["existingSecret"] == nil {
		vals := maps.Clone(o.Values)
		if vals == nil {
			vals = map[string]any{}
		}
		d := maps.Clone(db)
		if d == nil {
			d = map[string]any{}
		}
		d["existingSecret"] = "gpuplane-database"
		vals["database"] = d
		o.Values = vals
	}
	return o
}

// Rendered is one render of the chart.
type Rendered struct {
	// Objects in a stable order (by template file, then position in it),
	// hooks included.
	Objects []*unstructured.Unstructured
	// Source maps each object (by Key) to the template that produced it.
	Source map[string]string
	// Notes is the rendered NOTES.txt.
	Notes string
}

// Key identifies an object: "Kind/namespace/name" ("Kind/name" when
// cluster-scoped).
func Key(o *unstructured.Unstructured) string {
	if ns := o.GetNamespace(); ns != "" {
		return o.GetKind() + "/" + ns + "/" + o.GetName()
	}
	return o.GetKind() + "/" + o.GetName()
}

// Find returns the object of that kind and name, or nil.
func (r *Rendered) Find(kind, name string) *unstructured.Unstructured {
	for _, o := range r.Objects {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

// OfKind returns every object of one kind.
func (r *Rendered) OfKind(kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range r.Objects {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

// Render validates opts.Values against values.schema.json (as Helm does) and
// renders every template.
func Render(opts Options) (*Rendered, error) {
	opts = opts.withDefaults()
	ch, err := Load()
	if err != nil {
		return nil, err
	}
	caps, err := capabilities(opts)
	if err != nil {
		return nil, err
	}
	vals, err := plain(opts.Values)
	if err != nil {
		return nil, err
	}
	top, err := chartutil.ToRenderValues(ch, vals, common.ReleaseOptions{
		Name: opts.ReleaseName, Namespace: opts.Namespace, Revision: 1,
		IsInstall: !opts.IsUpgrade, IsUpgrade: opts.IsUpgrade,
	}, caps)
	if err != nil {
		return nil, fmt.Errorf("charttest: values: %w", err)
	}
	files, err := engine.Render(ch, top)
	if err != nil {
		return nil, fmt.Errorf("charttest: render: %w", err)
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	out := &Rendered{Source: map[string]string{}}
	for _, name := range names {
		base := filepath.Base(name)
		switch {
		case base == "NOTES.txt":
			out.Notes = files[name]
			continue
		case strings.HasPrefix(base, "_"), !strings.HasSuffix(base, ".yaml"):
			continue
		}
		objs, err := Decode(files[name])
		if err != nil {
			return nil, fmt.Errorf("charttest: %s: %w", name, err)
		}
		for _, o := range objs {
			key := Key(o)
			if prev, dup := out.Source[key]; dup {
				return nil, fmt.Errorf("charttest: %s renders %s again (first in %s)", name, key, prev)
			}
			out.Source[key] = name
			out.Objects = append(out.Objects, o)
		}
	}
	return out, nil
}

// ValidateValues checks values (merged over values.yaml) against
// values.schema.json, exactly as `helm install` does before rendering.
func ValidateValues(values map[string]any) error {
	ch, err := Load()
	if err != nil {
		return err
	}
	vals, err := plain(values)
	if err != nil {
		return err
	}
	merged, err := chartutil.CoalesceValues(ch, vals)
	if err != nil {
		return err
	}
	return chartutil.ValidateAgainstSchema(ch, merged)
}

// ReadValuesFile reads a YAML values file.
func ReadValuesFile(path string) (map[string]any, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var v map[string]any
	if err := yaml.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

// Decode splits a multi-document YAML stream into objects, skipping empty
// documents.
func Decode(manifest string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	r := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(manifest)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, fmt.Errorf("%w in document:\n%s", err, doc)
		}
		if len(m) == 0 {
			continue
		}
		o := &unstructured.Unstructured{Object: m}
		if o.GetKind() == "" || o.GetAPIVersion() == "" || o.GetName() == "" {
			return nil, fmt.Errorf("document without apiVersion, kind or name:\n%s", doc)
		}
		out = append(out, o)
	}
}

func capabilities(opts Options) (*common.Capabilities, error) {
	kv, err := common.ParseKubeVersion(opts.KubeVersion)
	if err != nil {
		return nil, err
	}
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kv
	caps.APIVersions = append(slices.Clone(caps.APIVersions), opts.APIVersions...)
	return caps, nil
}

// plain turns typed Go values into the JSON-shaped maps Helm expects.
func plain(values map[string]any) (map[string]any, error) {
	if values == nil {
		return map[string]any{}, nil
	}
	data, err := yaml.Marshal(values)
	if err != nil {
		return nil, err
	}
	var out map[string]any
	if err := yaml.Unmarshal(data, &out); err != nil {
		return nil, err
	}
	if out == nil {
		out = map[string]any{}
	}
	return out, nil
}
