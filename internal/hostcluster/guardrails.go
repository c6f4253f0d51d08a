package hostcluster

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/gpuplane/gpuplane/internal/vclusterversions"
)

// The admission guardrails are one program shared by every virtual cluster
// on a host cluster: a ValidatingAdmissionPolicy (and, where the server has
// them, a MutatingAdmissionPolicy), each with one binding, that read the
// values of the virtual cluster a pod belongs to from its host namespace
// (namespaceObject, annotations under GuardrailParamPrefix, written only by
// gpuplane). See docs/isolation.md, "Why one shared program".
//
// Why shared rather than one set of policies per virtual cluster:
//
//   - A new virtual cluster is guarded the moment its namespace exists. The
//     API server loads policies and bindings on a one-second loop, so a
//     policy created with the namespace is enforced only up to a second
//     later; the namespace a binding selects and namespaceObject, by
//     contrast, are read from the API server's namespace cache with a read
//     from storage when the namespace is not cached yet
//     (k8s.io/apiserver admission/plugin/webhook/predicates/namespace), so
//     a namespace created with its parameters is seen with them by the
//     first request into it.
//   - Every pod admission evaluates each binding's namespace selector:
//     with per-virtual-cluster bindings that is O(virtual clusters) per pod
//     on the whole host, with these O(1).
//   - The host holds four admission objects instead of four per virtual
//     cluster.
//
// Who can change the parameters: namespaces are cluster-scoped, and the
// vCluster syncer's Role (the chart's templates/role.yaml) is namespaced,
// so neither it nor anything a tenant runs can write its namespace's
// labels or annotations; cluster admins can, as they could edit the
// policies themselves. A namespace that carries GuardrailsLabel but lacks
// a parameter refuses every pod (the first rule), and a missing parameter
// can only make an expression fail, which with failurePolicy Fail is a
// refusal too: the program fails closed.

// GuardrailsVersion names the current guardrail program. The policies are
// named after it and bind the namespaces labelled GuardrailsLabel with it,
// so a program that changes what the parameters mean gets a new version,
// loaded beside the old one, instead of changing the rules under
// namespaces written for the old one.
const GuardrailsVersion = "v1"

// GuardrailsLabel on a host namespace selects the shared guardrails of that
// version (GuardrailsVersion).
const GuardrailsLabel = "gpuplane.io/guardrails"

// GuardrailsPolicyName names the shared admission policies and their
// bindings (the same name for all four kinds).
const GuardrailsPolicyName = "gpuplane-guardrails-" + GuardrailsVersion

// GuardrailParamPrefix starts the host namespace annotations the guardrails
// read their values from.
const GuardrailParamPrefix = "guardrails.gpuplane.io/"

// GuardrailProbeAnnotation on a pod makes the guardrails refuse it with the
// namespace's parameter digest and the pod's queue label, as mutated: the
// worker's dry-run probe (probeGuardrails), which shows that the policies
// are in force in a namespace, see its current parameters and, where there
// is one, that the mutating policy labels KAI pods. Anyone may set it; it
// only ever refuses the pod that carries it.
const GuardrailProbeAnnotation = GuardrailParamPrefix + "probe"

// Parameter keys (after GuardrailParamPrefix).
const (
	paramVirtualCluster   = "virtual-cluster"
	paramQueue            = "queue"
	paramWho              = "who" // "virtual cluster <name> (tier <tier>)", for messages
	paramSyncer           = "syncer"
	paramPoolLabel        = "pool-label"
	paramPool             = "pool"
	paramPools            = "pools"
	paramPoolsMessage     = "pools-message"
	paramPinPool          = "pin-pool"
	paramOwnScheduler     = "own-scheduler"
	paramPresetNodes      = "preset-nodes"
	paramNodeNameWhy      = "node-name-why"
	paramSharedGPUs       = "shared-gpus-refused" // why, or "" when allowed
	paramForbiddenKeys    = "forbidden-toleration-keys"
	paramPriorityClasses  = "priority-classes"
	paramPreemptibility   = "preemptibility"
	paramKAINodePoolLabel = "kai-node-pool-label"
	paramLabelKAIPods     = "label-kai-pods" // the mutating policy applies
	paramDigest           = "digest"
)

// guardrailParamKeys are every parameter the program reads; the namespace
// must carry them all.
var guardrailParamKeys = []string{
	paramVirtualCluster, paramQueue, paramWho, paramSyncer, paramPoolLabel, paramPool, paramPools, paramPoolsMessage,
	paramPinPool, paramOwnScheduler, paramPresetNodes, paramNodeNameWhy, paramSharedGPUs, paramForbiddenKeys,
	paramPriorityClasses, paramPreemptibility, paramKAINodePoolLabel, paramLabelKAIPods, paramDigest,
}

// Guardrails are the shared admission policies. Mutating and
// MutatingBinding are nil when the API server has no
// MutatingAdmissionPolicy.
type Guardrails struct {
	Validating        *admissionac.ValidatingAdmissionPolicyApplyConfiguration
	ValidatingBinding *admissionac.ValidatingAdmissionPolicyBindingApplyConfiguration
	Mutating          *admissionac.MutatingAdmissionPolicyApplyConfiguration
	MutatingBinding   *admissionac.MutatingAdmissionPolicyBindingApplyConfiguration
}

// CEL fragments over a Pod. GPU pods request nvidia.com/gpu (or a MIG slice,
// which KAI also counts as GPU) in any container or init container, or ask
// for a shared GPU by annotation.
const (
	celGPUResource = `r == '` + NvidiaGPUResource + `' || r.startsWith('nvidia.com/mig-')`
	celRequestsGPU = `(object.spec.containers + (has(object.spec.initContainers) ? object.spec.initContainers : [])).exists(c, has(c.resources) && ` +
		`((has(c.resources.limits) && c.resources.limits.exists(r, ` + celGPUResource + `)) || ` +
		`(has(c.resources.requests) && c.resources.requests.exists(r, ` + celGPUResource + `))))`
	celSharedGPU = `has(object.metadata.annotations) && ('` + KAIFractionAnnot + `' in object.metadata.annotations || '` + KAIGPUMemoryAnnot + `' in object.metadata.annotations)`
	celKAIPod    = `has(object.spec.schedulerName) && object.spec.schedulerName == '` + KAISchedulerName + `'`
	celHasQueue  = `has(object.metadata.labels) && '` + KAIQueueLabel + `' in object.metadata.labels`
	// celNamespaceParams are the namespace's annotations, where the
	// parameters live.
	celNamespaceParams = `(has(namespaceObject.metadata.annotations) ? namespaceObject.metadata.annotations : {})`
)

// cel quotes s as a CEL string literal (CEL accepts Go's escapes).
func cel(s string) string { return strconv.Quote(s) }

// celList renders a CEL list literal of strings.
func celList(items []string) string {
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = cel(s)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// quotedList is a human list of quoted names for messages: "a", "b".
func quotedList(items []string) string {
	if len(items) == 0 {
		return "none"
	}
	q := make([]string, len(items))
	for i, s := range items {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// celQuotedList is quotedList in CEL, over a list of strings.
func celQuotedList(list string) string {
	return `(size(` + list + `) == 0 ? "none" : ` + list + `.map(x, "\"" + x + "\"").join(", "))`
}

// param is a parameter's value in the program (the variable "params" is
// the namespace's annotations).
func param(key string) string { return `variables.params[` + cel(GuardrailParamPrefix+key) + `]` }

// paramList is a comma-separated parameter as a list ("" is empty).
func paramList(key string) string {
	return `(` + param(key) + ` == "" ? [] : ` + param(key) + `.split(","))`
}

// guardrailRule is one validation: Expression must hold; Message (a CEL
// string expression) tells the tenant what was refused and why.
type guardrailRule struct {
	Expression, Message string
}

// GuardrailParams are the values the shared guardrails enforce for vc,
// written as annotations of its host namespace (RenderNamespace), keyed
// without GuardrailParamPrefix. They come from the tier's profile
// (Settings.Profile) and the virtual cluster; mutating says whether the
// mutating policy gives its KAI pods their labels. The "digest" entry
// identifies the others, so that a probe can tell which parameters the API
// server's admission sees.
//
// KAI itself checks nothing (KAI#2068: any pod may name any queue; a pod
// without schedulerName bypasses KAI quotas, KAI#140), and the vCluster
// syncer copies node names, tolerations, node selectors, affinity, labels
// and annotations from the virtual pod to the host pod. So on the host:
//
//   - a GPU pod must use schedulerName kai-scheduler;
//   - a kai.scheduler/queue label, where present, must name the leaf queue,
//     and a pod KAI schedules must carry it (unlabelled pods land in KAI's
//     default-queue, outside the tenant's quota). Where the server supports
//     MutatingAdmissionPolicy (GA in 1.36) a mutating policy adds the label
//     first, so tenants need not know their queue name;
//   - shared-GPU annotations (gpu-fraction, gpu-memory) are refused unless
//     the tier allows shared GPUs and the virtual cluster asked for them:
//     KAI does not isolate GPU memory, and pods sharing a GPU may belong to
//     different tenants;
//   - a new pod may not preset spec.nodeName (unless the profile lists the
//     node): it would never meet a scheduler, so neither quota nor pools
//     would apply;
//   - tolerations: no blanket {operator: Exists} without a key; the pool
//     taint only with a pool the virtual cluster may use (its own, plus the
//     profile's extra pools), never with operator Exists; none of the
//     profile's forbidden taint keys;
//   - node selectors and node-affinity terms (required and preferred) may
//     name only allowed pools, and only with operator In;
//   - priority classes (spec.priorityClassName and the priorityClassName
//     label KAI reads first) and the kai.scheduler/preemptibility label only
//     with values the profile allows;
//   - the syncer may not set the runai-gpu-group label on a new pod, nor
//     change or remove it on an update: KAI's binder sets it for pods
//     sharing a GPU, and from vCluster 0.21 the label merge would let a
//     tenant forge or strip it;
//   - pods the syncer creates for a virtual cluster pinned to its own pool
//     (DEDICATED) must carry the pool's node selector.
//
// Placement and label rules hold on UPDATE too, but a field an update
// leaves unchanged is not judged again: pods admitted under earlier rules
// keep working with the syncer, and a change can still never add anything
// the rules refuse.
func GuardrailParams(vc VirtualCluster, s Settings, mutating bool) map[string]string {
	s = s.withDefaults()
	p := s.Profile(vc.Tier)
	pools := allowedPools(vc, p)
	who := "virtual cluster " + vc.Name + " (tier " + vc.Tier + ")"
	poolsMessage := who + ` may only use node pool ` + quotedList(pools)
	if len(pools) > 1 {
		poolsMessage = who + ` may only use node pools ` + quotedList(pools)
	}

	presets := p.PresetNodeNames
	nodeNameWhy := "a pod of " + who + " may not pick its node: it must go through a scheduler, so that its queue's quota and node pool apply"
	if len(p.PresetNodeNames) > 0 {
		nodeNameWhy = who + " may only preset node(s) " + quotedList(p.PresetNodeNames)
	}
	if p.OwnScheduler {
		// A pod its own scheduler bound to a node of the slice skips KAI
		// (the slice is the team's own nodes).
		presets = append(slices.Clone(presets), vc.SliceNodes...)
		nodeNameWhy = who + " runs its own scheduler on the nodes of its slice (pool " + vc.pool() + "), and may only preset those: " + quotedList(presets)
		if len(presets) == 0 {
			nodeNameWhy = who + " runs its own scheduler on the nodes of its slice (pool " + vc.pool() + "), which has no nodes"
		}
	}

	sharedGPUsRefused := ""
	if !vc.fractionalGPUs(p) {
		sharedGPUsRefused = "fractional GPUs are not enabled for virtual cluster " + vc.Name
		switch {
		case !p.FractionalGPUs:
			sharedGPUsRefused = "virtual cluster " + vc.Name + " is in the " + vc.Tier + " tier, and " + p.FractionalGPUsRefusal
		case vc.chartDropsGPUGroup():
			sharedGPUsRefused = "virtual cluster " + vc.Name + " runs vCluster chart " + vclusterversions.Normalize(vc.ChartVersion) +
				", whose syncer drops " + KAIGPUGroupLabel + " (the GPU-sharing group set by KAI) from host pods; it must be upgraded to chart " +
				vclusterversions.NewestKeepingHostLabels() + " first"
		}
	}
	params := map[string]string{
		paramVirtualCluster:   vc.Name,
		paramQueue:            LeafQueueName(vc.Name),
		paramWho:              who,
		paramSyncer:           SyncerUsername(vc.Name),
		paramPoolLabel:        s.PoolLabel,
		paramPool:             vc.pool(),
		paramPools:            strings.Join(pools, ","),
		paramPoolsMessage:     poolsMessage,
		paramPinPool:          strconv.FormatBool(vc.pool() != DefaultPool),
		paramOwnScheduler:     strconv.FormatBool(p.OwnScheduler),
		paramPresetNodes:      strings.Join(presets, ","),
		paramNodeNameWhy:      nodeNameWhy,
		paramSharedGPUs:       sharedGPUsRefused,
		paramForbiddenKeys:    strings.Join(p.ForbiddenTolerationKeys, ","),
		paramPriorityClasses:  strings.Join(p.PriorityClasses, ","),
		paramPreemptibility:   strings.Join(p.Preemptibility, ","),
		paramKAINodePoolLabel: s.KAINodePoolLabel,
		paramLabelKAIPods:     strconv.FormatBool(mutating),
	}
	params[paramDigest] = paramsDigest(params)
	return params
}

// paramsDigest identifies a parameter set (all keys but the digest).
func paramsDigest(params map[string]string) string {
	h := sha256.New()
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if k != paramDigest {
			fmt.Fprintf(h, "%s=%s\x00", k, params[k])
		}
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// guardrailAnnotations are the parameters as namespace annotations.
func guardrailAnnotations(params map[string]string) map[string]string {
	out := make(map[string]string, len(params))
	for k, v := range params {
		out[GuardrailParamPrefix+k] = v
	}
	return out
}

// RenderGuardrails renders the shared admission policies (see the comment
// at the top of this file, and GuardrailParams for what they enforce).
// They match every pod CREATE and UPDATE in a namespace labelled
// GuardrailsLabel=GuardrailsVersion and fail closed; mutating adds the
// mutating policy.
func RenderGuardrails(mutating bool) Guardrails {
	labels := map[string]string{LabelManagedBy: ManagedByValue, GuardrailsLabel: GuardrailsVersion}
	podRules := admissionac.MatchResources().WithResourceRules(
		admissionac.NamedRuleWithOperations().
			WithOperations(admissionv1.Create, admissionv1.Update).
			WithAPIGroups("").WithAPIVersions("v1").WithResources("pods"))
	guarded := metav1ac.LabelSelector().WithMatchLabels(map[string]string{GuardrailsLabel: GuardrailsVersion})

	var validations []*admissionac.ValidationApplyConfiguration
	for _, r := range guardrailRules() {
		validations = append(validations, admissionac.Validation().
			WithExpression(r.Expression).
			WithReason(metav1.StatusReasonForbidden).
			WithMessageExpression(r.Message))
	}
	g := Guardrails{
		Validating: admissionac.ValidatingAdmissionPolicy(GuardrailsPolicyName).
			WithLabels(labels).
			WithSpec(admissionac.ValidatingAdmissionPolicySpec().
				WithFailurePolicy(admissionv1.Fail).
				WithMatchConstraints(podRules).
				WithVariables(guardrailVariables()...).
				WithValidations(validations...)),
		ValidatingBinding: admissionac.ValidatingAdmissionPolicyBinding(GuardrailsPolicyName).
			WithLabels(labels).
			WithSpec(admissionac.ValidatingAdmissionPolicyBindingSpec().
				WithPolicyName(GuardrailsPolicyName).
				WithValidationActions(admissionv1.Deny).
				WithMatchResources(admissionac.MatchResources().WithNamespaceSelector(guarded))),
	}
	if mutating {
		hasLabel := func(key string) string {
			return `(has(object.metadata.labels) && ` + key + ` in object.metadata.labels)`
		}
		g.Mutating = admissionac.MutatingAdmissionPolicy(GuardrailsPolicyName).
			WithLabels(labels).
			WithSpec(admissionac.MutatingAdmissionPolicySpec().
				WithFailurePolicy(admissionv1.Fail).
				WithMatchConstraints(podRules).
				// Match conditions see the pod only (namespaceObject is not
				// bound there): the namespace's parameters are read by the
				// mutations.
				WithMatchConditions(admissionac.MatchCondition().
					WithName("kai-pod").
					WithExpression(`(`+celRequestsGPU+`) || (`+celSharedGPU+`) || (`+celKAIPod+`)`)).
				WithVariables(
					admissionac.Variable().WithName("params").WithExpression(celNamespaceParams),
					admissionac.Variable().WithName("labelKAIPods").WithExpression(param(paramLabelKAIPods)+` == "true"`),
					admissionac.Variable().WithName("queue").WithExpression(param(paramQueue)),
					admissionac.Variable().WithName("pool").WithExpression(param(paramPool)),
					admissionac.Variable().WithName("kaiPoolKey").WithExpression(param(paramKAINodePoolLabel))).
				WithReinvocationPolicy(admissionv1.NeverReinvocationPolicy).
				// Each adds a missing label, leaving present ones (even wrong
				// ones, which the validating policy then refuses) untouched.
				WithMutations(
					admissionac.Mutation().
						WithPatchType(admissionv1.PatchTypeApplyConfiguration).
						WithApplyConfiguration(admissionac.ApplyConfiguration().WithExpression(
							`!variables.labelKAIPods || `+hasLabel(cel(KAIQueueLabel))+` ? Object{} : `+
								`Object{metadata: Object.metadata{labels: {`+cel(KAIQueueLabel)+`: variables.queue}}}`)),
					admissionac.Mutation().
						WithPatchType(admissionv1.PatchTypeApplyConfiguration).
						WithApplyConfiguration(admissionac.ApplyConfiguration().WithExpression(
							`!variables.labelKAIPods || variables.kaiPoolKey == "" || `+hasLabel("variables.kaiPoolKey")+` ? Object{} : `+
								`Object{metadata: Object.metadata{labels: {variables.kaiPoolKey: variables.pool}}}`))))
		g.MutatingBinding = admissionac.MutatingAdmissionPolicyBinding(GuardrailsPolicyName).
			WithLabels(labels).
			WithSpec(admissionac.MutatingAdmissionPolicyBindingSpec().
				WithPolicyName(GuardrailsPolicyName).
				WithMatchResources(admissionac.MatchResources().WithNamespaceSelector(guarded)))
	}
	return g
}

// guardrailVariables are evaluated lazily, only by the rules that use them.
func guardrailVariables() []*admissionac.VariableApplyConfiguration {
	v := func(name, expr string) *admissionac.VariableApplyConfiguration {
		return admissionac.Variable().WithName(name).WithExpression(expr)
	}
	affinity := func(field string) string {
		return `has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity) && has(object.spec.affinity.nodeAffinity.` + field + `)`
	}
	// A node-selector requirement on the pool label is fine only as
	// "<label> In [allowed pools]"; NotIn, Exists, DoesNotExist, Gt and Lt
	// would reach pools by exclusion.
	badExpr := `e.key == variables.poolLabel && !(e.operator == "In" && has(e.values) && e.values.all(x, x in variables.pools))`
	return []*admissionac.VariableApplyConfiguration{
		v("params", celNamespaceParams),
		v("vcName", param(paramVirtualCluster)),
		v("queue", param(paramQueue)),
		v("who", param(paramWho)),
		v("poolLabel", param(paramPoolLabel)),
		v("pool", param(paramPool)),
		v("pools", paramList(paramPools)),
		v("poolsMessage", param(paramPoolsMessage)),
		v("pinPool", param(paramPinPool)+` == "true"`),
		v("ownScheduler", param(paramOwnScheduler)+` == "true"`),
		v("presetNodes", paramList(paramPresetNodes)),
		v("forbiddenKeys", paramList(paramForbiddenKeys)),
		v("priorityClasses", paramList(paramPriorityClasses)),
		v("preemptibility", paramList(paramPreemptibility)),
		v("kaiPoolKey", param(paramKAINodePoolLabel)),
		// A pod its own scheduler (TierProfile.OwnScheduler) bound to a node
		// of the slice.
		v("boundInSlice", `variables.ownScheduler && has(object.spec.nodeName) && object.spec.nodeName in variables.presetNodes`),
		v("gpuPod", `(`+celRequestsGPU+`) || (`+celSharedGPU+`)`),
		v("kaiPod", `variables.gpuPod || (`+celKAIPod+`)`),
		v("isUpdate", `request.operation == "UPDATE"`),
		v("fromSyncer", `request.userInfo.username == `+param(paramSyncer)),
		v("labels", `has(object.metadata.labels) ? object.metadata.labels : {}`),
		v("oldLabels", `variables.isUpdate && has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}`),
		v("tolerations", `has(object.spec.tolerations) ? object.spec.tolerations : []`),
		v("tolerationsUnchanged", unchanged("spec.tolerations")),
		v("badPoolTolerations", `variables.tolerations.filter(t, has(t.key) && t.key == variables.poolLabel && `+
			`((has(t.operator) && t.operator == "Exists") || !has(t.value) || !(t.value in variables.pools)))`+
			`.map(t, (has(t.operator) && t.operator == "Exists") ? variables.poolLabel + " with operator Exists (every pool)" : variables.poolLabel + "=" + (has(t.value) ? t.value : ""))`),
		v("nodeSelectorUnchanged", unchanged("spec.nodeSelector")),
		v("affinityUnchanged", unchanged("spec.affinity")),
		v("nodeSelectorTerms", `(`+affinity("requiredDuringSchedulingIgnoredDuringExecution")+` ? object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms : []) + `+
			`(`+affinity("preferredDuringSchedulingIgnoredDuringExecution")+` ? object.spec.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution.map(p, p.preference) : [])`),
		v("badAffinity", `variables.nodeSelectorTerms.map(term, has(term.matchExpressions) ? term.matchExpressions.filter(e, `+badExpr+`)`+
			`.map(e, e.key + " " + e.operator + (has(e.values) ? " [" + e.values.join(", ") + "]" : "")) : []).filter(l, size(l) > 0).map(l, l.join(", ")).join("; ")`),
	}
}

// unchanged is a CEL expression: this request is an UPDATE that leaves the
// (optional) field at path as it was.
func unchanged(path string) string {
	return `variables.isUpdate && has(oldObject.` + path + `) == has(object.` + path + `) && ` +
		`(!has(object.` + path + `) || oldObject.` + path + ` == object.` + path + `)`
}

// labelRule allows label key only with a value from the list variable
// allowed (or unchanged on update).
func labelRule(key, allowed string) guardrailRule {
	k := cel(key)
	list := "variables." + allowed
	return guardrailRule{
		Expression: `!(` + k + ` in variables.labels) || variables.labels[` + k + `] in ` + list +
			` || (` + k + ` in variables.oldLabels && variables.oldLabels[` + k + `] == variables.labels[` + k + `])`,
		Message: `"label ` + key + `=" + variables.labels[` + k + `] + " is not allowed for " + variables.who + "; allowed: " + ` + celQuotedList(list),
	}
}

// guardrailRules are the validations, in the order a tenant's pod meets
// them (the first failing one is the message). The first two are the
// program's own: the parameters must be there, and the worker's probe.
func guardrailRules() []guardrailRule {
	keys := make([]string, len(guardrailParamKeys))
	for i, k := range guardrailParamKeys {
		keys[i] = GuardrailParamPrefix + k
	}
	all := celList(keys)
	return []guardrailRule{
		{
			Expression: all + `.all(k, k in variables.params)`,
			Message: `"namespace " + namespaceObject.metadata.name + " lacks gpuplane's guardrail parameters (" + ` +
				all + `.filter(k, !(k in variables.params)).join(", ") + "); its pods are refused until the gpuplane worker restores them"`,
		},
		{
			Expression: `!(has(object.metadata.annotations) && ` + cel(GuardrailProbeAnnotation) + ` in object.metadata.annotations)`,
			Message: `"gpuplane guardrail probe: parameters " + ` + param(paramDigest) + ` + ", queue label " + ` +
				`(` + celHasQueue + ` ? object.metadata.labels['` + KAIQueueLabel + `'] : "none")`,
		},
		{
			Expression: `!variables.gpuPod || (` + celKAIPod + `) || variables.boundInSlice`,
			Message: `'pods using GPUs must set spec.schedulerName: ` + KAISchedulerName + ` (got "' + ` +
				`(has(object.spec.schedulerName) ? object.spec.schedulerName : 'default-scheduler') + ` +
				`'"); other schedulers bypass the quota of queue ' + variables.queue + ` +
				`(variables.ownScheduler ? '; a pod its own scheduler binds may only name a node of its slice (pool ' + variables.pool + ')' : '')`,
		},
		{
			Expression: `!(` + celHasQueue + `) || object.metadata.labels['` + KAIQueueLabel + `'] == variables.queue`,
			Message: `'label ` + KAIQueueLabel + ` must be "' + variables.queue + '", the queue of virtual cluster ' + variables.vcName + ` +
				`' (got "' + object.metadata.labels['` + KAIQueueLabel + `'] + '")'`,
		},
		{
			Expression: `!variables.kaiPod || (` + celHasQueue + `)`,
			Message: `'pods scheduled by ` + KAISchedulerName + ` must carry label ` + KAIQueueLabel + `=' + variables.queue + ` +
				`'; without it KAI puts them in default-queue, outside the quota of this virtual cluster'`,
		},
		{
			Expression: param(paramSharedGPUs) + ` == "" || !(` + celSharedGPU + `)`,
			Message: `'shared-GPU annotations (` + KAIFractionAnnot + `, ` + KAIGPUMemoryAnnot + `) are refused: ' + ` + param(paramSharedGPUs) +
				` + '; request whole GPUs with ` + NvidiaGPUResource + `'`,
		},
		{
			// On UPDATE spec.nodeName cannot change (the scheduler binds
			// through pods/binding, which these policies do not match).
			Expression: `variables.isUpdate || !has(object.spec.nodeName) || object.spec.nodeName == "" || object.spec.nodeName in variables.presetNodes`,
			Message:    `"spec.nodeName is preset to \"" + object.spec.nodeName + "\": " + ` + param(paramNodeNameWhy),
		},
		{
			Expression: `variables.tolerationsUnchanged || !variables.tolerations.exists(t, (!has(t.key) || t.key == "") && has(t.operator) && t.operator == "Exists")`,
			Message: `"a toleration with operator Exists and no key tolerates every taint, including those that fence other teams' node pools; ` +
				`tolerate the taint keys you need by name"`,
		},
		{
			Expression: `variables.tolerationsUnchanged || size(variables.badPoolTolerations) == 0`,
			Message:    `"toleration of taint " + variables.badPoolTolerations.join(", ") + " is refused: " + variables.poolsMessage`,
		},
		{
			Expression: `size(variables.forbiddenKeys) == 0 || variables.tolerationsUnchanged || !variables.tolerations.exists(t, has(t.key) && t.key in variables.forbiddenKeys)`,
			Message: `"toleration of taint key " + variables.tolerations.filter(t, has(t.key) && t.key in variables.forbiddenKeys).map(t, t.key).join(", ") + ` +
				`" is refused: nodes with that taint are reserved for the platform"`,
		},
		{
			Expression: `variables.nodeSelectorUnchanged || !has(object.spec.nodeSelector) || !(variables.poolLabel in object.spec.nodeSelector) || ` +
				`object.spec.nodeSelector[variables.poolLabel] in variables.pools`,
			Message: `"nodeSelector " + variables.poolLabel + "=" + object.spec.nodeSelector[variables.poolLabel] + " is refused: " + variables.poolsMessage`,
		},
		{
			Expression: `variables.affinityUnchanged || variables.badAffinity == ""`,
			Message:    `"node affinity " + variables.badAffinity + " is refused: " + variables.poolsMessage + ", selected only with operator In"`,
		},
		{
			// spec.priorityClassName is immutable once set.
			Expression: `variables.isUpdate || !has(object.spec.priorityClassName) || object.spec.priorityClassName in variables.priorityClasses`,
			Message: `"priority class \"" + object.spec.priorityClassName + "\" is not allowed for " + variables.who + "; allowed: " + ` +
				celQuotedList("variables.priorityClasses"),
		},
		labelRule(KAIPriorityLabel, "priorityClasses"),
		labelRule(KAIPreemptibilityLabel, "preemptibility"),
		{
			Expression: `!variables.fromSyncer || variables.isUpdate || !("` + KAIGPUGroupLabel + `" in variables.labels)`,
			Message: `"label ` + KAIGPUGroupLabel + ` is set only by KAI's binder for pods sharing a GPU; a pod of " + variables.who + ` +
				`" may not bring its own (got \"" + variables.labels["` + KAIGPUGroupLabel + `"] + "\")"`,
		},
		{
			Expression: `!variables.fromSyncer || !variables.isUpdate || (("` + KAIGPUGroupLabel + `" in variables.labels) == ("` + KAIGPUGroupLabel + `" in variables.oldLabels) && ` +
				`(!("` + KAIGPUGroupLabel + `" in variables.labels) || variables.labels["` + KAIGPUGroupLabel + `"] == variables.oldLabels["` + KAIGPUGroupLabel + `"]))`,
			Message: `"label ` + KAIGPUGroupLabel + ` is owned by KAI's binder: the syncer of virtual cluster " + variables.vcName + " may not change or remove it (was " + ` +
				`("` + KAIGPUGroupLabel + `" in variables.oldLabels ? "\"" + variables.oldLabels["` + KAIGPUGroupLabel + `"] + "\"" : "absent") + ", now " + ` +
				`("` + KAIGPUGroupLabel + `" in variables.labels ? "\"" + variables.labels["` + KAIGPUGroupLabel + `"] + "\"" : "absent") + ")"`,
		},
		{
			Expression: `variables.kaiPoolKey == "" || !(variables.kaiPoolKey in variables.labels) || variables.labels[variables.kaiPoolKey] == variables.pool`,
			Message: `"label " + variables.kaiPoolKey + " must be \"" + variables.pool + "\", the KAI node pool of " + variables.who + ` +
				`" (got \"" + variables.labels[variables.kaiPoolKey] + "\")"`,
		},
		{
			Expression: `variables.kaiPoolKey == "" || !variables.kaiPod || variables.kaiPoolKey in variables.labels`,
			Message: `"pods scheduled by ` + KAISchedulerName + ` must carry label " + variables.kaiPoolKey + "=" + variables.pool + ` +
				`": KAI's node pools pick their pods by it"`,
		},
		{
			Expression: `!variables.pinPool || !variables.fromSyncer || variables.nodeSelectorUnchanged || (has(object.spec.nodeSelector) && variables.poolLabel in object.spec.nodeSelector && ` +
				`object.spec.nodeSelector[variables.poolLabel] == variables.pool) || variables.boundInSlice`,
			Message: `"pods of " + variables.who + " must carry nodeSelector " + variables.poolLabel + "=" + variables.pool + ` +
				`": they run only on the team's own node pool (the vCluster syncer adds it to every pod without a preset node)"`,
		},
	}
}
