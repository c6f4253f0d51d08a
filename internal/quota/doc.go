// Package quota holds the platform's resource quantities and the arithmetic
// of the quota hierarchy (host cluster -> department -> team -> virtual
// cluster). Everything is integer arithmetic so that sums and comparisons are
// exact: a budget of 1 GPU split as 0.25 + 0.75 must fit, and must fit on
// every machine and in every language that re-checks it.
//
// The package is pure: no storage, transport or Kubernetes imports. The only
// floating point values are the KAI Scheduler queue fields, produced at the
// very edge by ToKAI.
package quota
