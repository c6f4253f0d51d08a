package webhook_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/webhook"
)

// TestURLPolicyAtDialTime: the address actually dialled is checked too,
// so a host that passed validation and later resolves to a forbidden
// address (DNS rebinding) is still refused.
func TestURLPolicyAtDialTime(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	defer srv.Close()

	// http to 127.0.0.1 allowed, the loopback range not.
	strict := &webhook.URLPolicy{AllowHTTPHosts: []string{"127.0.0.1"}}
	if err := strict.Check(context.Background(), "url", srv.URL); errs.KindOf(err) != errs.KindInvalidArgument {
		t.Errorf("validation of a loopback URL: %v", err)
	}
	_, err := strict.Client(time.Second).Get(srv.URL)
	if !errors.Is(err, webhook.ErrRefused) {
		t.Errorf("dialling loopback: %v, want ErrRefused", err)
	}
	for _, u := range []string{"https://localhost/x", "https://169.254.169.254/", "https://[fe80::1]/", "https://100.100.100.200/", "https://192.168.1.1/"} {
		if err := strict.Check(context.Background(), "url", u); errs.KindOf(err) != errs.KindInvalidArgument {
			t.Errorf("%s: %v", u, err)
		}
	}

	allowed := localPolicy()
	if err := allowed.Check(context.Background(), "url", srv.URL); err != nil {
		t.Errorf("allowed range: %v", err)
	}
	resp, err := allowed.Client(time.Second).Get(srv.URL)
	if err != nil {
		t.Fatalf("dialling an allowed range: %v", err)
	}
	resp.Body.Close()
}
