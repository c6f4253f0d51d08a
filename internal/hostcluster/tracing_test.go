package hostcluster

import "testing"

func TestAPIResource(t *testing.T) {
	for path, want := range map[string]string{
		"/api/v1/namespaces":                                      "namespaces",
		"/api/v1/namespaces/vc-a":                                 "namespaces",
		"/api/v1/namespaces/vc-a/secrets/vc-a":                    "secrets",
		"/api/v1/namespaces/vc-a/pods":                            "pods",
		"/apis/scheduling.run.ai/v2/queues/dept-x":                "queues",
		"/apis/scheduling.run.ai/v2/queues/dept-x/status":         "queues/status",
		"/apis/apps/v1/namespaces/vc-a/statefulsets/a":            "statefulsets",
		"/apis/networking.k8s.io/v1/namespaces/n/networkpolicies": "networkpolicies",
		"/api":     "/api",
		"/version": "/version",
	} {
		if got := apiResource(path); got != want {
			t.Errorf("apiResource(%q) = %q, want %q", path, got, want)
		}
	}
}
