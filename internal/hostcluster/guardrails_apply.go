package hostcluster

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// applyGuardrails is Apply's guardrail step: the shared policies exist as
// rendered (ensureSharedGuardrails), the API server enforces them in vc's
// namespace with the parameters just written there (probeGuardrails, once
// per combination of policy objects and parameters), and only then are the
// admission objects of the old per-virtual-cluster design removed, so a
// namespace moved from those to the shared ones is never without one of
// them. It records the shared objects' versions in versions.
func (c *Client) applyGuardrails(ctx context.Context, vc VirtualCluster, params map[string]string, mutating bool, versions map[string]string) (string, error) {
	shared, err := c.ensureSharedGuardrails(ctx, mutating)
	if err != nil {
		return "", err
	}
	maps.Copy(versions, shared)
	detail := "shared validating policy " + GuardrailsPolicyName + " (no MutatingAdmissionPolicy on this server: pods must set " + KAIQueueLabel + " themselves)"
	if mutating {
		detail = "shared validating and mutating policies " + GuardrailsPolicyName
	}
	// What the probe showed in force: these policy objects, this namespace
	// (its UID) with these parameters. The API server never unloads a policy
	// it enforces while the object stays the same, and reads the namespace
	// for every request, so the same combination need not be probed again.
	nsUID, _, _ := strings.Cut(versions[versionNamespace], "@")
	key := guardrailVersions(versions, mutating) + "|" + nsUID + "|" + params[paramDigest]
	if c.enforcementVerified(vc.Name, key) {
		detail += ", in force with parameters " + params[paramDigest] + " (unchanged since)"
	} else {
		if err := c.probeGuardrails(ctx, vc, params[paramDigest], mutating); err != nil {
			return "", err
		}
		c.rememberVerified(vc.Name, key)
		detail += ", in force with parameters " + params[paramDigest] + " (probed)"
	}
	removed, err := c.removeLegacyGuardrails(ctx, vc.Name)
	if err != nil {
		return detail, err
	}
	if removed > 0 {
		detail += fmt.Sprintf("; removed the %d per-virtual-cluster admission objects %s it replaces", removed, PolicyName(vc.Name))
	}
	return detail, nil
}

// Admission object kinds of the guardrails, in the order they are applied
// (a policy before its binding).
func guardrailKinds(mutating bool) []string {
	if mutating {
		return []string{vapKind, vapbKind, mapKind, mapbKind}
	}
	return []string{vapKind, vapbKind}
}

// ensureSharedGuardrails applies the shared policies and bindings unless
// the host holds exactly what this Client applied last (same UID and spec
// generation: nobody changed or re-created them since), and returns their
// versions. One Apply at a time does it: the others wait and reuse the
// result.
func (c *Client) ensureSharedGuardrails(ctx context.Context, mutating bool) (map[string]string, error) {
	c.guardMu.Lock()
	defer c.guardMu.Unlock()
	live, _, err := c.sharedGuardrailVersions(ctx, mutating)
	if err != nil {
		return nil, err
	}
	if c.guardApplied != nil && maps.Equal(live, c.guardApplied) {
		return maps.Clone(live), nil
	}
	g := RenderGuardrails(mutating)
	apply := metav1.ApplyOptions{FieldManager: FieldManager, Force: true}
	adm := c.kube.AdmissionregistrationV1()
	out := map[string]string{}
	for _, kind := range guardrailKinds(mutating) {
		var obj metav1.Object
		var err error
		// Another worker process may create the same object at the same
		// moment (a host cluster's first virtual clusters): the apply
		// that lost the race is sent again, as an update.
		for attempt := 0; attempt < 3; attempt++ {
			switch kind {
			case vapKind:
				obj, err = adm.ValidatingAdmissionPolicies().Apply(ctx, g.Validating, apply)
			case vapbKind:
				obj, err = adm.ValidatingAdmissionPolicyBindings().Apply(ctx, g.ValidatingBinding, apply)
			case mapKind:
				obj, err = adm.MutatingAdmissionPolicies().Apply(ctx, g.Mutating, apply)
			case mapbKind:
				obj, err = adm.MutatingAdmissionPolicyBindings().Apply(ctx, g.MutatingBinding, apply)
			}
			if !apierrors.IsAlreadyExists(err) && !apierrors.IsConflict(err) {
				break
			}
		}
		if err != nil {
			return nil, fmt.Errorf("shared %s %s: %w", kind, GuardrailsPolicyName, err)
		}
		c.wrote(admissionGVR(kind), obj)
		out[policyVersionKey(kind)] = specVersion(obj.GetUID(), obj.GetGeneration())
	}
	c.guardApplied = out
	return maps.Clone(out), nil
}

// guardrailProbeTimeout bounds how long Apply waits for the shared policies
// to take effect in a namespace.
var guardrailProbeTimeout = 15 * time.Second

// guardrailProbeInterval is how often a probe that found the policies not
// in force yet is sent again. The API server loads new or changed policies
// once a second; a namespace's parameters it reads for every request, so
// for a new namespace under policies in force the first probe answers.
const guardrailProbeInterval = 100 * time.Millisecond

// probeGuardrails waits until the API server's admission refuses a dry-run
// pod carrying GuardrailProbeAnnotation in vc's namespace with the shared
// policy's probe rule, naming the parameter digest the namespace was just
// given and, where there is a mutating policy, the queue label it adds to
// a KAI pod without one: then the validating policy and its binding are
// loaded, select this namespace and see its current parameters, and the
// mutating policy labels its pods. Until then the release (and with it the
// syncer, the only writer of tenant pods) is not installed. A probe that
// does not reach the API server ends the wait at once with that error, so
// the caller sees an outage (Unreachable) rather than, 15 s later, a
// policy that "has not loaded yet".
func (c *Client) probeGuardrails(ctx context.Context, vc VirtualCluster, digest string, mutating bool) error {
	ns := NamespaceName(vc.Name)
	queue := "none"
	if mutating {
		queue = LeafQueueName(vc.Name)
	}
	want := "gpuplane guardrail probe: parameters " + digest + ", queue label " + queue
	deadline := time.Now().Add(guardrailProbeTimeout)
	var last string // the latest answer, for the error
	for {
		// Compliant with Pod Security "restricted" and with every other
		// rule, so that only the probe rule refuses it.
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "gpuplane-guardrail-probe", Annotations: map[string]string{GuardrailProbeAnnotation: "true"}},
			Spec:       restrictedPodSpec("probe", "registry.k8s.io/pause:3.10"),
		}
		if mutating {
			p.Spec.SchedulerName = KAISchedulerName // a KAI pod without a queue label: the mutating policy's to label
		}
		_, err := c.kube.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		switch {
		case Unreachable(err):
			return fmt.Errorf("guardrail probe: %w", err)
		case err == nil:
			last = "admitted"
		case (apierrors.IsForbidden(err) || apierrors.IsInvalid(err)) && strings.Contains(err.Error(), "'"+GuardrailsPolicyName+"'"):
			if strings.Contains(err.Error(), want) {
				return nil
			}
			last = err.Error()
		default:
			last = err.Error()
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("admission policy %s not in force in namespace %s after %s (want %q, last answer: %s): the API server has not loaded it yet",
				GuardrailsPolicyName, ns, guardrailProbeTimeout, want, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(guardrailProbeInterval):
		}
	}
}

// removeLegacyGuardrails deletes the admission objects the per-virtual-
// cluster design created for vcName (PolicyName), bindings first, and
// returns how many there were.
func (c *Client) removeLegacyGuardrails(ctx context.Context, vcName string) (int, error) {
	mutating, err := c.MutatingAdmissionPolicySupported()
	if err != nil {
		return 0, err
	}
	name := PolicyName(vcName)
	kinds := guardrailKinds(mutating)
	n := 0
	for i := len(kinds) - 1; i >= 0; i-- { // bindings before their policies
		kind := kinds[i]
		present, err := c.admissionObjectExists(ctx, kind, name)
		if err != nil {
			return n, err
		}
		if !present {
			continue
		}
		err = c.dyn.Resource(admissionGVR(kind)).Delete(ctx, name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			return n, fmt.Errorf("delete per-virtual-cluster %s %s: %w", kind, name, err)
		}
		n++
	}
	return n, nil
}

// observeGuardrails fills in what Observe reports of the guardrails:
// present when the shared policies and bindings exist and the namespace
// (nsLabels, nsAnnotations) carries the guardrails label and exactly the
// parameters Apply would write now.
func (c *Client) observeGuardrails(ctx context.Context, vc VirtualCluster, mutating bool, nsLabels, nsAnnotations map[string]string, o *Observed) error {
	live, warnings, err := c.sharedGuardrailVersions(ctx, mutating)
	if err != nil {
		return err
	}
	maps.Copy(o.versions, live)
	o.GuardrailWarnings = warnings
	o.GuardrailsPresent = len(live) == len(guardrailKinds(mutating))
	if !o.GuardrailsPresent || nsLabels[GuardrailsLabel] != GuardrailsVersion {
		o.GuardrailsPresent = false
		return nil
	}
	if c.settings.Profile(vc.Tier).OwnScheduler {
		nodes, err := c.sliceNodes(ctx, vc)
		if err != nil {
			return err
		}
		vc.SliceNodes = nodes
	}
	for k, v := range GuardrailParams(vc, c.settings, mutating) {
		if got, ok := nsAnnotations[GuardrailParamPrefix+k]; !ok || got != v {
			o.GuardrailsPresent = false
			return nil
		}
	}
	return nil
}
