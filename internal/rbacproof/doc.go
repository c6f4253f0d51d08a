// Package rbacproof holds only tests: they prove on a real kube-apiserver
// (envtest, RBAC authorizer) that the ClusterRoles rendered by gpuplane's
// Helm chart (deploy/chart) are sufficient and minimal.
//
//   - Sufficient: the worker's ServiceAccount, bound to nothing but the
//     chart's worker ClusterRole and authenticating with its own token, runs
//     the worker's whole reconcile through hostcluster.Client (create +
//     observe, quota change, resync, delete, node capacity) for a SHARED and
//     a DEDICATED virtual cluster, with the OIDC settings production uses;
//     and the API server's ServiceAccount reads node capacity and a virtual
//     cluster's CA and admin kubeconfig Secret; all without one RBAC denial.
//   - Minimal: for every (API group, resource, verb) the chart grants, a
//     role without exactly that one permission makes the same reconcile fail,
//     and the API server's denial names exactly that permission.
//
// The ClusterRoles are read from the rendered chart (deploy/charttest),
// never copied, so a change to the chart or to what the worker does is
// caught here.
package rbacproof
