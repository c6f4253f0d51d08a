// Package sdktest runs the Go SDK (module github.com/gpuplane/gpuplane/pkg/client)
// against a real server started in-process. The tests live here, in the
// server's module, because starting a server needs internal packages and
// the SDK's own module must not depend on the server's (Kubernetes, Helm,
// pgx): pkg/client/deps_test.go proves it does not.
package sdktest
