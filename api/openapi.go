// Package api holds the generated API code and the OpenAPI document.
package api

import _ "embed"

// OpenAPI is the merged OpenAPI 3.1 document for the REST API.
//
//go:embed openapi.yaml
var OpenAPI []byte
