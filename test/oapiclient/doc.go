// Package oapiclient is a Go client generated from api/openapi.yaml by
// oapi-codegen, an independent generator, exactly as a new user would
// generate one: `go generate` (config oapi-codegen.yaml), no hand fixes.
// Its test calls a real server with it. It is a module of its own so the
// generator and its runtime stay out of the server's go.mod.
package oapiclient

//go:generate go tool oapi-codegen -config oapi-codegen.yaml ../../api/openapi.yaml
