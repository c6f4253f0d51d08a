package hostcluster

import (
	"slices"
	"strconv"
	"strings"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	admissionac "k8s.io/client-go/applyconfigurations/admissionregistration/v1"
	metav1ac "k8s.io/client-go/applyconfigurations/meta/v1"

	"github.com/gpuplane/gpuplane/internal/vclusterversions"
)

// Guardrails are the admission policies of one virtual cluster. Mutating
// and MutatingBinding are nil when the API server has no
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

// guardrailRule is one validation: Expression must hold; Message (a CEL
// string expression) tells the tenant what was refused and why.
type guardrailRule struct {
	Expression, Message string
}

// RenderGuardrails renders the admission policies of one virtual cluster,
// parameterised by its tier's profile (Settings.Profile). They match every
// pod CREATE and UPDATE in the host namespace, fail closed, and carry all
// values as literals: no parameter objects a namespace admin could edit.
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
func RenderGuardrails(vc VirtualCluster, s Settings, mutating bool) Guardrails {
	s = s.withDefaults()
	profile := s.Profile(vc.Tier)
	name := PolicyName(vc.Name)
	ns := NamespaceName(vc.Name)
	labels := commonLabels(vc)
	annotations := generationAnnotations(vc)
	podRules := admissionac.MatchResources().WithResourceRules(
		admissionac.NamedRuleWithOperations().
			WithOperations(admissionv1.Create, admissionv1.Update).
			WithAPIGroups("").WithAPIVersions("v1").WithResources("pods"))
	inNamespace := metav1ac.LabelSelector().WithMatchLabels(map[string]string{namespaceNameLabel: ns})

	var validations []*admissionac.ValidationApplyConfiguration
	for _, r := range guardrailRules(vc, s, profile) {
		validations = append(validations, admissionac.Validation().
			WithExpression(r.Expression).
			WithReason(metav1.StatusReasonForbidden).
			WithMessageExpression(r.Message))
	}

	g := Guardrails{
		Validating: admissionac.ValidatingAdmissionPolicy(name).
			WithLabels(labels).WithAnnotations(annotations).
			WithSpec(admissionac.ValidatingAdmissionPolicySpec().
				WithFailurePolicy(admissionv1.Fail).
				WithMatchConstraints(podRules).
				WithVariables(guardrailVariables(vc, s.PoolLabel, profile)...).
				WithValidations(validations...)),
		ValidatingBinding: admissionac.ValidatingAdmissionPolicyBinding(name).
			WithLabels(labels).WithAnnotations(annotations).
			WithSpec(admissionac.ValidatingAdmissionPolicyBindingSpec().
				WithPolicyName(name).
				WithValidationActions(admissionv1.Deny).
				WithMatchResources(admissionac.MatchResources().WithNamespaceSelector(inNamespace))),
	}
	if mutating {
		g.Mutating = admissionac.MutatingAdmissionPolicy(name).
			WithLabels(labels).WithAnnotations(annotations).
			WithSpec(admissionac.MutatingAdmissionPolicySpec().
				WithFailurePolicy(admissionv1.Fail).
				WithMatchConstraints(podRules).
				WithMatchConditions(admissionac.MatchCondition().
					WithName("kai-pod-without-queue").
					WithExpression(`((` + celRequestsGPU + `) || (` + celSharedGPU + `) || (` + celKAIPod + `)) && !(` + celHasLabels(missingLabels(vc, s)) + `)`)).
				WithReinvocationPolicy(admissionv1.NeverReinvocationPolicy).
				WithMutations(labelMutations(vc, s)...))
		g.MutatingBinding = admissionac.MutatingAdmissionPolicyBinding(name).
			WithLabels(labels).WithAnnotations(annotations).
			WithSpec(admissionac.MutatingAdmissionPolicyBindingSpec().
				WithPolicyName(name).
				WithMatchResources(admissionac.MatchResources().WithNamespaceSelector(inNamespace)))
	}
	return g
}

// missingLabels are the labels the mutating policy gives a KAI pod that
// lacks them: its leaf queue, and with KAI node pools its pool.
func missingLabels(vc VirtualCluster, s Settings) [][2]string {
	out := [][2]string{{KAIQueueLabel, LeafQueueName(vc.Name)}}
	if s.KAINodePoolLabel != "" {
		out = append(out, [2]string{s.KAINodePoolLabel, vc.pool()})
	}
	return out
}

// celHasLabels: the pod carries every one of the labels' keys.
func celHasLabels(labels [][2]string) string {
	var all []string
	for _, l := range labels {
		all = append(all, `(has(object.metadata.labels) && `+cel(l[0])+` in object.metadata.labels)`)
	}
	return strings.Join(all, " && ")
}

// labelMutations add each missing label, leaving present ones (even wrong
// ones, which the validating policy then refuses) untouched.
func labelMutations(vc VirtualCluster, s Settings) []*admissionac.MutationApplyConfiguration {
	var out []*admissionac.MutationApplyConfiguration
	for _, l := range missingLabels(vc, s) {
		out = append(out, admissionac.Mutation().
			WithPatchType(admissionv1.PatchTypeApplyConfiguration).
			WithApplyConfiguration(admissionac.ApplyConfiguration().WithExpression(
				`has(object.metadata.labels) && `+cel(l[0])+` in object.metadata.labels ? Object{} : `+
					`Object{metadata: Object.metadata{labels: {`+cel(l[0])+`: `+cel(l[1])+`}}}`)))
	}
	return out
}

// guardrailVariables are evaluated lazily, only by the rules that use them.
func guardrailVariables(vc VirtualCluster, poolLabel string, p TierProfile) []*admissionac.VariableApplyConfiguration {
	v := func(name, expr string) *admissionac.VariableApplyConfiguration {
		return admissionac.Variable().WithName(name).WithExpression(expr)
	}
	pools := celList(allowedPools(vc, p))
	pool := cel(poolLabel)
	affinity := func(field string) string {
		return `has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity) && has(object.spec.affinity.nodeAffinity.` + field + `)`
	}
	// A node-selector requirement on the pool label is fine only as
	// "<label> In [allowed pools]"; NotIn, Exists, DoesNotExist, Gt and Lt
	// would reach pools by exclusion.
	badExpr := `e.key == ` + pool + ` && !(e.operator == "In" && has(e.values) && e.values.all(x, x in ` + pools + `))`
	return []*admissionac.VariableApplyConfiguration{
		v("gpuPod", `(`+celRequestsGPU+`) || (`+celSharedGPU+`)`),
		v("kaiPod", `variables.gpuPod || (`+celKAIPod+`)`),
		v("isUpdate", `request.operation == "UPDATE"`),
		v("fromSyncer", `request.userInfo.username == `+cel(SyncerUsername(vc.Name))),
		v("labels", `has(object.metadata.labels) ? object.metadata.labels : {}`),
		v("oldLabels", `variables.isUpdate && has(oldObject.metadata.labels) ? oldObject.metadata.labels : {}`),
		v("tolerations", `has(object.spec.tolerations) ? object.spec.tolerations : []`),
		v("tolerationsUnchanged", unchanged("spec.tolerations")),
		v("badPoolTolerations", `variables.tolerations.filter(t, has(t.key) && t.key == `+pool+` && `+
			`((has(t.operator) && t.operator == "Exists") || !has(t.value) || !(t.value in `+pools+`)))`+
			`.map(t, (has(t.operator) && t.operator == "Exists") ? `+pool+` + " with operator Exists (every pool)" : `+pool+` + "=" + (has(t.value) ? t.value : ""))`),
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

// labelRule allows label key only with a value from allowed (or unchanged
// on update).
func labelRule(key string, allowed []string, who string) guardrailRule {
	k := cel(key)
	return guardrailRule{
		Expression: `!(` + k + ` in variables.labels) || variables.labels[` + k + `] in ` + celList(allowed) +
			` || (` + k + ` in variables.oldLabels && variables.oldLabels[` + k + `] == variables.labels[` + k + `])`,
		Message: `"label ` + key + `=" + variables.labels[` + k + `] + " is not allowed for ` + escapeForCEL(who) + `; allowed: ` + escapeForCEL(quotedList(allowed)) + `"`,
	}
}

func guardrailRules(vc VirtualCluster, s Settings, p TierProfile) []guardrailRule {
	poolLabel := s.PoolLabel
	leaf := LeafQueueName(vc.Name)
	pools := allowedPools(vc, p)
	who := "virtual cluster " + vc.Name + " (tier " + vc.Tier + ")"
	poolsMessage := who + ` may only use node pool ` + quotedList(pools)
	if len(pools) > 1 {
		poolsMessage = who + ` may only use node pools ` + quotedList(pools)
	}
	pool := cel(poolLabel)

	// A tier with its own scheduler: a pod that scheduler bound to a node
	// of the slice skips KAI (the slice is the team's own nodes).
	boundInSlice, ownSchedulerNote := "", ""
	if p.OwnScheduler {
		ownSchedulerNote = `; a pod its own scheduler binds may only name a node of its slice (pool ` + vc.pool() + `)`
		boundInSlice = ` || (has(object.spec.nodeName) && object.spec.nodeName in ` + celList(append(slices.Clone(p.PresetNodeNames), vc.SliceNodes...)) + `)`
	}
	rules := []guardrailRule{
		{
			Expression: `!variables.gpuPod || (` + celKAIPod + `)` + boundInSlice,
			Message: `'pods using GPUs must set spec.schedulerName: ` + KAISchedulerName + ` (got "' + ` +
				`(has(object.spec.schedulerName) ? object.spec.schedulerName : 'default-scheduler') + ` +
				`'"); other schedulers bypass the quota of queue ` + leaf + ownSchedulerNote + `'`,
		},
		{
			Expression: `!(` + celHasQueue + `) || object.metadata.labels['` + KAIQueueLabel + `'] == '` + leaf + `'`,
			Message: `'label ` + KAIQueueLabel + ` must be "` + leaf + `", the queue of virtual cluster ` + vc.Name +
				` (got "' + object.metadata.labels['` + KAIQueueLabel + `'] + '")'`,
		},
		{
			Expression: `!variables.kaiPod || (` + celHasQueue + `)`,
			Message: `'pods scheduled by ` + KAISchedulerName + ` must carry label ` + KAIQueueLabel + `=` + leaf +
				`; without it KAI puts them in default-queue, outside the quota of this virtual cluster'`,
		},
	}
	if !vc.fractionalGPUs(p) {
		why := "fractional GPUs are not enabled for virtual cluster " + vc.Name
		switch {
		case !p.FractionalGPUs:
			why = "virtual cluster " + vc.Name + " is in the " + vc.Tier + " tier, and " + p.FractionalGPUsRefusal
		case vc.chartDropsGPUGroup():
			why = "virtual cluster " + vc.Name + " runs vCluster chart " + vclusterversions.Normalize(vc.ChartVersion) +
				", whose syncer drops " + KAIGPUGroupLabel + " (the GPU-sharing group set by KAI) from host pods; it must be upgraded to chart " +
				vclusterversions.NewestKeepingHostLabels() + " first"
		}
		rules = append(rules, guardrailRule{
			Expression: `!(` + celSharedGPU + `)`,
			Message: `'shared-GPU annotations (` + KAIFractionAnnot + `, ` + KAIGPUMemoryAnnot + `) are refused: ` + why +
				`; request whole GPUs with ` + NvidiaGPUResource + `'`,
		})
	}

	presets := p.PresetNodeNames
	nodeNameWhy := "a pod of " + who + " may not pick its node: it must go through a scheduler, so that its queue's quota and node pool apply"
	if len(p.PresetNodeNames) > 0 {
		nodeNameWhy = who + " may only preset node(s) " + quotedList(p.PresetNodeNames)
	}
	if p.OwnScheduler {
		presets = append(slices.Clone(presets), vc.SliceNodes...)
		nodeNameWhy = who + " runs its own scheduler on the nodes of its slice (pool " + vc.pool() + "), and may only preset those: " + quotedList(presets)
		if len(presets) == 0 {
			nodeNameWhy = who + " runs its own scheduler on the nodes of its slice (pool " + vc.pool() + "), which has no nodes"
		}
	}
	rules = append(rules,
		guardrailRule{
			// On UPDATE spec.nodeName cannot change (the scheduler binds
			// through pods/binding, which these policies do not match).
			Expression: `variables.isUpdate || !has(object.spec.nodeName) || object.spec.nodeName == "" || object.spec.nodeName in ` + celList(presets),
			Message:    `"spec.nodeName is preset to \"" + object.spec.nodeName + "\": ` + escapeForCEL(nodeNameWhy) + `"`,
		},
		guardrailRule{
			Expression: `variables.tolerationsUnchanged || !variables.tolerations.exists(t, (!has(t.key) || t.key == "") && has(t.operator) && t.operator == "Exists")`,
			Message: `"a toleration with operator Exists and no key tolerates every taint, including those that fence other teams' node pools; ` +
				`tolerate the taint keys you need by name"`,
		},
		guardrailRule{
			Expression: `variables.tolerationsUnchanged || size(variables.badPoolTolerations) == 0`,
			Message:    `"toleration of taint " + variables.badPoolTolerations.join(", ") + " is refused: ` + escapeForCEL(poolsMessage) + `"`,
		},
	)
	if len(p.ForbiddenTolerationKeys) > 0 {
		forbidden := celList(p.ForbiddenTolerationKeys)
		rules = append(rules, guardrailRule{
			Expression: `variables.tolerationsUnchanged || !variables.tolerations.exists(t, has(t.key) && t.key in ` + forbidden + `)`,
			Message: `"toleration of taint key " + variables.tolerations.filter(t, has(t.key) && t.key in ` + forbidden + `).map(t, t.key).join(", ") + ` +
				`" is refused: nodes with that taint are reserved for the platform"`,
		})
	}
	rules = append(rules,
		guardrailRule{
			Expression: `variables.nodeSelectorUnchanged || !has(object.spec.nodeSelector) || !(` + pool + ` in object.spec.nodeSelector) || ` +
				`object.spec.nodeSelector[` + pool + `] in ` + celList(pools),
			Message: `"nodeSelector ` + poolLabel + `=" + object.spec.nodeSelector[` + pool + `] + " is refused: ` + escapeForCEL(poolsMessage) + `"`,
		},
		guardrailRule{
			Expression: `variables.affinityUnchanged || variables.badAffinity == ""`,
			Message: `"node affinity " + variables.badAffinity + " is refused: ` + escapeForCEL(poolsMessage) +
				`, selected only with operator In"`,
		},
		guardrailRule{
			// spec.priorityClassName is immutable once set.
			Expression: `variables.isUpdate || !has(object.spec.priorityClassName) || object.spec.priorityClassName in ` + celList(p.PriorityClasses),
			Message: `"priority class \"" + object.spec.priorityClassName + "\" is not allowed for ` + escapeForCEL(who) +
				`; allowed: ` + escapeForCEL(quotedList(p.PriorityClasses)) + `"`,
		},
		labelRule(KAIPriorityLabel, p.PriorityClasses, who),
		labelRule(KAIPreemptibilityLabel, p.Preemptibility, who),
		guardrailRule{
			Expression: `!variables.fromSyncer || variables.isUpdate || !("` + KAIGPUGroupLabel + `" in variables.labels)`,
			Message: `"label ` + KAIGPUGroupLabel + ` is set only by KAI's binder for pods sharing a GPU; a pod of ` + escapeForCEL(who) +
				` may not bring its own (got \"" + variables.labels["` + KAIGPUGroupLabel + `"] + "\")"`,
		},
		guardrailRule{
			Expression: `!variables.fromSyncer || !variables.isUpdate || (("` + KAIGPUGroupLabel + `" in variables.labels) == ("` + KAIGPUGroupLabel + `" in variables.oldLabels) && ` +
				`(!("` + KAIGPUGroupLabel + `" in variables.labels) || variables.labels["` + KAIGPUGroupLabel + `"] == variables.oldLabels["` + KAIGPUGroupLabel + `"]))`,
			Message: `"label ` + KAIGPUGroupLabel + ` is owned by KAI's binder: the syncer of virtual cluster ` + vc.Name + ` may not change or remove it (was " + ` +
				`("` + KAIGPUGroupLabel + `" in variables.oldLabels ? "\"" + variables.oldLabels["` + KAIGPUGroupLabel + `"] + "\"" : "absent") + ", now " + ` +
				`("` + KAIGPUGroupLabel + `" in variables.labels ? "\"" + variables.labels["` + KAIGPUGroupLabel + `"] + "\"" : "absent") + ")"`,
		},
	)
	if key := s.KAINodePoolLabel; key != "" {
		k, own := cel(key), vc.pool()
		rules = append(rules,
			guardrailRule{
				Expression: `!(` + k + ` in variables.labels) || variables.labels[` + k + `] == ` + cel(own),
				Message: `"label ` + key + ` must be \"` + own + `\", the KAI node pool of ` + escapeForCEL(who) +
					` (got \"" + variables.labels[` + k + `] + "\")"`,
			},
			guardrailRule{
				Expression: `!variables.kaiPod || ` + k + ` in variables.labels`,
				Message: `"pods scheduled by ` + KAISchedulerName + ` must carry label ` + key + `=` + own +
					`: KAI's node pools pick their pods by it"`,
			})
	}
	if own := vc.pool(); own != DefaultPool {
		rules = append(rules, guardrailRule{
			Expression: `!variables.fromSyncer || variables.nodeSelectorUnchanged || (has(object.spec.nodeSelector) && ` + pool + ` in object.spec.nodeSelector && ` +
				`object.spec.nodeSelector[` + pool + `] == ` + cel(own) + `)` + boundInSlice,
			Message: `"pods of ` + escapeForCEL(who) + ` must carry nodeSelector ` + poolLabel + `=` + own +
				`: they run only on the team's own node pool (the vCluster syncer adds it to every pod without a preset node)"`,
		})
	}
	return rules
}

// escapeForCEL escapes s for use inside a double-quoted CEL string literal.
func escapeForCEL(s string) string {
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}
