package sdktest_test

import (
	"errors"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/gpuplane/gpuplane/internal/webhook"
	"github.com/gpuplane/gpuplane/pkg/client"
)

// The published test vectors: ours (package doc) and the Standard
// Webhooks specification's, which proves the scheme interoperates with
// its libraries.
var webhookVectors = []struct {
	secret, id string
	ts         int64
	body, sig  string
}{
	{"whsec_dGVzdC1zZWNyZXQtZm9yLWdwdXBsYW5lLXZlY3RvcnM=", "123", 1764547200, `{"specversion":"1.0","id":"123"}`,
		"v1,3NXyyujZfc757ue9E4SKHQwQnPpxw+DUVA19GLYA22Y="},
	{"whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek", 1614265330, `{"test": 2432232314}`,
		"v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="},
}

func webhookHeader(id string, ts int64, sig string) http.Header {
	h := http.Header{}
	h.Set(client.WebhookIDHeader, id)
	h.Set(client.WebhookTimestampHeader, strconv.FormatInt(ts, 10))
	h.Set(client.WebhookSignatureHeader, sig)
	return h
}

func TestWebhookVectors(t *testing.T) {
	for _, v := range webhookVectors {
		sig, err := client.SignWebhook([]string{v.secret}, v.id, time.Unix(v.ts, 0), []byte(v.body))
		if err != nil || sig != v.sig {
			t.Errorf("sign %s: %q %v, want %q", v.id, sig, err, v.sig)
		}
		// The server signs the same way.
		if srv, err := webhook.Sign([]string{v.secret}, v.id, time.Unix(v.ts, 0), []byte(v.body)); err != nil || srv != v.sig {
			t.Errorf("server signs %s: %q %v", v.id, srv, err)
		}
		now := time.Unix(v.ts+30, 0)
		h := webhookHeader(v.id, v.ts, v.sig)
		if err := client.VerifyWebhook(h, []byte(v.body), now, 0, v.secret); err != nil {
			t.Errorf("verify %s: %v", v.id, err)
		}
		for name, bad := range map[string]func() error{
			"tampered body": func() error { return client.VerifyWebhook(h, []byte(v.body+" "), now, 0, v.secret) },
			"other secret": func() error {
				return client.VerifyWebhook(h, []byte(v.body), now, 0, webhookVectors[0].secret[:10]+"AAAA")
			},
			"replayed late": func() error { return client.VerifyWebhook(h, []byte(v.body), now.Add(10*time.Minute), 0, v.secret) },
			"from the future": func() error {
				return client.VerifyWebhook(h, []byte(v.body), time.Unix(v.ts-600, 0), 0, v.secret)
			},
			"other id": func() error {
				return client.VerifyWebhook(webhookHeader(v.id+"x", v.ts, v.sig), []byte(v.body), now, 0, v.secret)
			},
		} {
			if err := bad(); err == nil {
				t.Errorf("%s %s: verified", v.id, name)
			} else if name != "other secret" && !errors.Is(err, client.ErrWebhookSignature) {
				t.Errorf("%s %s: %v is not ErrWebhookSignature", v.id, name, err)
			}
		}
	}
}

// TestWebhookRotation: during a rotation each delivery carries a signature
// per active secret; a receiver with either one accepts it.
func TestWebhookRotation(t *testing.T) {
	oldS, newS := webhookVectors[0].secret, webhook.NewSecret()
	ts := time.Now()
	body := []byte(`{"id":"7"}`)
	sig, err := webhook.Sign([]string{newS, oldS}, "7", ts, body)
	if err != nil {
		t.Fatal(err)
	}
	h := webhookHeader("7", ts.Unix(), sig)
	for _, s := range []string{oldS, newS} {
		if err := client.VerifyWebhook(h, body, ts, 0, s); err != nil {
			t.Errorf("receiver with %s…: %v", s[:10], err)
		}
	}
	if err := client.VerifyWebhook(h, body, ts, 0, webhook.NewSecret()); err == nil {
		t.Error("a third secret verified")
	}
}
