package hostcluster

import (
	"context"
	"fmt"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The reads of Observe, Unchanged and Apply's checks, from the watch
// caches (cache.go).

// admissionResources are the resources of the admission object kinds.
var admissionResources = map[string]string{vapKind: "validatingadmissionpolicies", vapbKind: "validatingadmissionpolicybindings",
	mapKind: "mutatingadmissionpolicies", mapbKind: "mutatingadmissionpolicybindings"}

// admissionGVR is the resource of an admission object kind.
func admissionGVR(kind string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: admissionResources[kind]}
}

// admissionObjectExists reports whether the admission object kind/name
// (one gpuplane labelled as its own) exists.
func (c *Client) admissionObjectExists(ctx context.Context, kind, name string) (bool, error) {
	_, ok, err := c.getCached(ctx, admissionGVR(kind), "", name)
	return ok, err
}

// sharedGuardrailVersions are the versions of the shared guardrail objects
// that exist, by version key, and the CEL type-check warnings the API
// server's status controller reported on the validating policy.
func (c *Client) sharedGuardrailVersions(ctx context.Context, mutating bool) (map[string]string, []string, error) {
	out := map[string]string{}
	var warnings []string
	for _, kind := range guardrailKinds(mutating) {
		obj, ok, err := c.getCached(ctx, admissionGVR(kind), "", GuardrailsPolicyName)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			continue
		}
		m, err := metaOf(obj)
		if err != nil {
			return nil, nil, err
		}
		out[policyVersionKey(kind)] = specVersion(m.GetUID(), m.GetGeneration())
		if u, isVAP := obj.(*unstructured.Unstructured); isVAP && kind == vapKind {
			list, _, _ := unstructured.NestedSlice(u.Object, "status", "typeChecking", "expressionWarnings")
			for _, item := range list {
				w, _ := item.(map[string]any)
				ref, _ := w["fieldRef"].(string)
				msg, _ := w["warning"].(string)
				warnings = append(warnings, ref+": "+msg)
			}
		}
	}
	return out, warnings, nil
}

// cachedMeta reads an object's metadata from a metadata-only watch.
func (c *Client) cachedMeta(ctx context.Context, gvr schema.GroupVersionResource, namespace, name string) (*metav1.PartialObjectMetadata, bool, error) {
	obj, ok, err := c.getCached(ctx, gvr, namespace, name)
	if err != nil || !ok {
		return nil, false, err
	}
	m, isMeta := obj.(*metav1.PartialObjectMetadata)
	if !isMeta {
		return nil, false, fmt.Errorf("hostcluster: cached %s %s is a %T", gvr.Resource, name, obj)
	}
	return m, true, nil
}

// cachedQueue reads a queue.
func (c *Client) cachedQueue(ctx context.Context, name string) (*unstructured.Unstructured, bool, error) {
	obj, ok, err := c.getCached(ctx, QueueGVR, "", name)
	if err != nil || !ok {
		return nil, false, err
	}
	u, isU := obj.(*unstructured.Unstructured)
	if !isU {
		return nil, false, fmt.Errorf("hostcluster: cached queue %s is a %T", name, obj)
	}
	return u, true, nil
}

// cachedStatefulSet reads the control plane StatefulSet of vcName.
func (c *Client) cachedStatefulSet(ctx context.Context, vcName string) (*appsv1.StatefulSet, bool, error) {
	obj, ok, err := c.getCached(ctx, statefulSetsGVR, NamespaceName(vcName), ReleaseName(vcName))
	if err != nil || !ok {
		return nil, false, err
	}
	sts, isSts := obj.(*appsv1.StatefulSet)
	if !isSts {
		return nil, false, fmt.Errorf("hostcluster: cached StatefulSet is a %T", obj)
	}
	return sts, true, nil
}

// cachedService reads the control plane Service of vcName.
func (c *Client) cachedService(ctx context.Context, vcName string) (*corev1.Service, bool, error) {
	obj, ok, err := c.getCached(ctx, servicesGVR, NamespaceName(vcName), ReleaseName(vcName))
	if err != nil || !ok {
		return nil, false, err
	}
	svc, isSvc := obj.(*corev1.Service)
	if !isSvc {
		return nil, false, fmt.Errorf("hostcluster: cached Service is a %T", obj)
	}
	return svc, true, nil
}

// kubeconfigSecret is the metadata of the admin kubeconfig Secret vCluster
// wrote for vcName: from the watch of the Secrets vCluster labels, or read
// directly when that does not hold it (chart 0.20 labels it not, and
// before vCluster wrote it there is none). It is nil when there is none.
func (c *Client) kubeconfigSecret(ctx context.Context, vcName string) (*metav1.PartialObjectMetadata, error) {
	hc, err := c.caches(ctx)
	if err != nil {
		return nil, err
	}
	ns, name := NamespaceName(vcName), KubeconfigSecretName(vcName)
	obj, ok, err := hc.kubeconfigs.get(ctx, ns, name)
	if err != nil {
		return nil, err
	}
	if ok {
		if m, isMeta := obj.(*metav1.PartialObjectMetadata); isMeta {
			return m, nil
		}
	}
	m, err := c.meta.Resource(secretsGVR).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return m, err
}

// secretsGVR is for metadata-only reads of Helm's release records.
var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// releaseFromLabels reads the state of the last release revision from the
// labels of Helm's release Secrets (name, owner, status, version and
// gpuplane's values hash), without fetching or decoding the records (each
// holds the whole gzipped chart). It matches what Helm's storage returns
// as the last release: the record with the highest version. nil: no
// release (or only records without gpuplane's values hash, which
// EnsureRelease then reads through Helm's storage and upgrades).
func (c *Client) releaseFromLabels(ctx context.Context, vcName string) (*ReleaseState, error) {
	w, err := c.cached(ctx, secretsGVR)
	if err != nil {
		return nil, err
	}
	items, err := w.inNamespace(ctx, NamespaceName(vcName))
	if err != nil {
		return nil, err
	}
	var last *ReleaseState
	for _, item := range items {
		s, err := metaOf(item)
		if err != nil {
			return nil, err
		}
		l := s.GetLabels()
		if l["name"] != ReleaseName(vcName) || l["owner"] != "helm" {
			continue
		}
		v, err := strconv.Atoi(l["version"])
		if err != nil {
			return nil, fmt.Errorf("release record %s has version label %q", s.GetName(), l["version"])
		}
		if last == nil || v > last.Revision {
			last = &ReleaseState{Status: l["status"], Revision: v, ValuesHash: l[releaseLabelValuesHash]}
		}
	}
	return last, nil
}
