package hostcluster

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// admissionGVR is the resource of an admission object kind.
func admissionGVR(kind string) schema.GroupVersionResource {
	r := map[string]string{vapKind: "validatingadmissionpolicies", vapbKind: "validatingadmissionpolicybindings",
		mapKind: "mutatingadmissionpolicies", mapbKind: "mutatingadmissionpolicybindings"}[kind]
	return schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1", Resource: r}
}

// wrote records an object this Client wrote (for reads of it that follow).
func (c *Client) wrote(schema.GroupVersionResource, metav1.Object) {}

// admissionObjectExists reports whether the admission object kind/name
// exists.
func (c *Client) admissionObjectExists(ctx context.Context, kind, name string) (bool, error) {
	_, err := c.meta.Resource(admissionGVR(kind)).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// sharedGuardrailVersions are the versions of the shared guardrail objects
// that exist, by version key, and the CEL type-check warnings the API
// server's status controller reported on the validating policy.
func (c *Client) sharedGuardrailVersions(ctx context.Context, mutating bool) (map[string]string, []string, error) {
	out := map[string]string{}
	var warnings []string
	for _, kind := range guardrailKinds(mutating) {
		if kind == vapKind {
			vap, err := c.kube.AdmissionregistrationV1().ValidatingAdmissionPolicies().Get(ctx, GuardrailsPolicyName, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				continue
			}
			if err != nil {
				return nil, nil, err
			}
			out[policyVersionKey(kind)] = specVersion(vap.UID, vap.Generation)
			if vap.Status.TypeChecking != nil {
				for _, w := range vap.Status.TypeChecking.ExpressionWarnings {
					warnings = append(warnings, w.FieldRef+": "+w.Warning)
				}
			}
			continue
		}
		obj, err := c.meta.Resource(admissionGVR(kind)).Get(ctx, GuardrailsPolicyName, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		out[policyVersionKey(kind)] = specVersion(obj.GetUID(), obj.GetGeneration())
	}
	return out, warnings, nil
}
