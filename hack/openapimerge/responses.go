package main

import (
	"strings"
)

// errorResponse is one documented error status of the API. Every error
// body is a google.rpc.Status (schema Status) with an ErrorInfo detail.
type errorResponse struct {
	name, status, description string
}

var (
	badRequest = errorResponse{"BadRequest", "400", "INVALID_ARGUMENT: a field, filter or page token is invalid " +
		"(ErrorInfo reason INVALID_FIELD, INVALID_FILTER or INVALID_PAGE_TOKEN; BadRequest field violations name the fields by JSON path); " +
		"or FAILED_PRECONDITION: the current state does not allow it (e.g. QUOTA_EXCEEDED, INVALID_STATE_TRANSITION, HAS_DEPENDENTS)."}
	unauthenticated  = errorResponse{"Unauthenticated", "401", "UNAUTHENTICATED: no bearer token, or one that is expired, forged or for another issuer or audience."}
	permissionDenied = errorResponse{"PermissionDenied", "403", "PERMISSION_DENIED: the caller may read the object but not do this."}
	notFound         = errorResponse{"NotFound", "404", "NOT_FOUND: the object does not exist, or the caller may not read it (other teams' objects answer 404, not 403)."}
	conflict         = errorResponse{"Conflict", "409", "ABORTED: the etag sent is stale (ETAG_MISMATCH; read again and retry); " +
		"or ALREADY_EXISTS: an object with this id exists."}
	otherError = errorResponse{"Error", "default", "Any other error: 503 UNAVAILABLE (with Retry-After, e.g. IDENTITY_PROVIDER_UNAVAILABLE), " +
		"429 RESOURCE_EXHAUSTED, 500 INTERNAL (the X-Request-Id response header identifies it in the server logs)."}
)

// errorResponses replaces the generator's single `default` error with the
// statuses each kind of operation can answer, as shared components; it
// returns the components and defines the Status schema they use.
func errorResponses(paths, schemas obj) obj {
	schemas["google.rpc.Status"] = statusSchema()
	components := obj{}
	for _, item := range paths {
		for _, op := range item.(obj) {
			o := op.(obj)
			responses := o["responses"].(obj)
			delete(responses, "default")
			if ok, isOK := responses["200"].(obj); isOK {
				fixSuccess(ok)
			}
			for _, e := range errorsOf(o["operationId"].(string), o["parameters"]) {
				responses[e.status] = obj{"$ref": "#/components/responses/" + e.name}
				components[e.name] = obj{
					"description": e.description,
					"content":     obj{"application/json": obj{"schema": obj{"$ref": schemaRefPrefix + "google.rpc.Status"}}},
				}
			}
		}
	}
	return components
}

// errorsOf lists the error responses of an operation by what it does.
func errorsOf(operationID string, params any) []errorResponse {
	hasPath := false
	list, _ := params.([]any)
	for _, p := range list {
		if p.(obj)["in"] == "path" {
			hasPath = true
		}
	}
	out := []errorResponse{unauthenticated, otherError}
	switch {
	case operationID == "GetCurrentUser":
	case strings.HasPrefix(operationID, "List"):
		out = append(out, badRequest)
		if hasPath {
			out = append(out, notFound)
		}
	case strings.HasPrefix(operationID, "Get"), strings.HasPrefix(operationID, "Check"):
		out = append(out, badRequest, notFound)
		if strings.HasSuffix(operationID, "Kubeconfig") {
			out = append(out, permissionDenied)
		}
	default: // Create, Update, Delete and custom methods that change state
		out = append(out, badRequest, permissionDenied, notFound, conflict)
	}
	return out
}

// fixSuccess words the 200 response of a delete, which the generator
// describes with google.protobuf.Empty's comment.
func fixSuccess(ok obj) {
	if d, _ := ok["description"].(string); strings.HasPrefix(d, "A generic empty message") {
		ok["description"] = "Deleted; the body is an empty JSON object."
	}
}

// statusSchema is google.rpc.Status as the gateway writes it, with the
// detail types gpuplane sends.
func statusSchema() obj {
	str := obj{"type": "string"}
	return obj{
		"type": "object",
		"description": "An error: google.rpc.Status, the same body for every failed call. " +
			"details always holds a google.rpc.ErrorInfo (domain gpuplane.dev, a stable reason such as QUOTA_EXCEEDED); " +
			"bad input adds a google.rpc.BadRequest with field violations, retryable errors a google.rpc.RetryInfo.",
		"required": []string{"code", "message", "details"},
		"properties": obj{
			"code":    obj{"type": "integer", "format": "int32", "description": "The google.rpc.Code (3 INVALID_ARGUMENT, 5 NOT_FOUND, ...)."},
			"message": obj{"type": "string", "description": "What went wrong, for people."},
			"details": obj{
				"type":        "array",
				"description": "Typed details, each naming its type in @type.",
				"items": obj{
					"type": "object",
					"description": "One of: type.googleapis.com/google.rpc.ErrorInfo {reason, domain, metadata}; " +
						"type.googleapis.com/google.rpc.BadRequest {fieldViolations: [{field, description}]}; " +
						"type.googleapis.com/google.rpc.RetryInfo {retryDelay}.",
					"required":             []string{"@type"},
					"properties":           obj{"@type": str},
					"additionalProperties": true,
				},
			},
		},
	}
}
