// Package crds embeds the CustomResourceDefinition fixtures that gpuplane
// needs on an API server it starts itself (envtest in tests, dev mode). Real
// host clusters get these CRDs from their owners' charts (KAI Scheduler), so
// nothing here is ever installed into production.
package crds

import "embed"

// FS holds every CRD manifest of this directory. It is embedded rather than
// read from disk so that tests and the dev binary work from any working
// directory, and from a binary shipped without the source tree.
//
//go:embed *.yaml
var FS embed.FS
