package client

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Receiving gpuplane webhooks. Deliveries are CloudEvents 1.0 in
// structured mode (Content-Type application/cloudevents+json), signed per
// Standard Webhooks: the webhook-signature header holds one or more
// space-separated "v1,<base64 HMAC-SHA256>" signatures over
// "<webhook-id>.<webhook-timestamp>.<body>", keyed with the base64-decoded
// part of the subscription's secret after "whsec_". During a secret
// rotation every delivery carries a signature per active secret, so a
// receiver holding either secret accepts it.
//
// Test vectors (also in webhook_test.go):
//
//	secret    whsec_dGVzdC1zZWNyZXQtZm9yLWdwdXBsYW5lLXZlY3RvcnM=
//	id        123
//	timestamp 1764547200
//	body      {"specversion":"1.0","id":"123"}
//	signature v1,3NXyyujZfc757ue9E4SKHQwQnPpxw+DUVA19GLYA22Y=
//
// and the Standard Webhooks specification's own vector verifies too.

// Standard Webhooks headers.
const (
	WebhookIDHeader        = "webhook-id"
	WebhookTimestampHeader = "webhook-timestamp"
	WebhookSignatureHeader = "webhook-signature"
)

// DefaultWebhookTolerance is how far a delivery's timestamp may be from
// the receiver's clock (replayed old deliveries are refused).
const DefaultWebhookTolerance = 5 * time.Minute

// ErrWebhookSignature is returned for deliveries that are not signed with
// any of the secrets, or are too old or from the future.
var ErrWebhookSignature = errors.New("webhook: signature verification failed")

// SignWebhook computes the webhook-signature header value for body under
// each secret (what gpuplane sends; useful for tests of receivers).
func SignWebhook(secrets []string, id string, timestamp time.Time, body []byte) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		key, err := webhookKey(s)
		if err != nil {
			return "", err
		}
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(webhookMAC(key, id, timestamp.Unix(), body)))
	}
	return strings.Join(sigs, " "), nil
}

// VerifyWebhook checks a delivery's headers and body against the
// receiver's secret(s) ("whsec_..."): a v1 signature must match one of
// them, and the timestamp must be within tolerance of now (0:
// DefaultWebhookTolerance).
func VerifyWebhook(header http.Header, body []byte, now time.Time, tolerance time.Duration, secrets ...string) error {
	if tolerance <= 0 {
		tolerance = DefaultWebhookTolerance
	}
	id, tsRaw, sigs := header.Get(WebhookIDHeader), header.Get(WebhookTimestampHeader), header.Get(WebhookSignatureHeader)
	if id == "" || tsRaw == "" || sigs == "" {
		return fmt.Errorf("%w: missing %s, %s or %s header", ErrWebhookSignature, WebhookIDHeader, WebhookTimestampHeader, WebhookSignatureHeader)
	}
	ts, err := strconv.ParseInt(tsRaw, 10, 64)
	if err != nil {
		return fmt.Errorf("%w: malformed timestamp %q", ErrWebhookSignature, tsRaw)
	}
	if d := now.Sub(time.Unix(ts, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: timestamp %d is %v away from now (tolerance %v)", ErrWebhookSignature, ts, d.Round(time.Second), tolerance)
	}
	for _, s := range secrets {
		key, err := webhookKey(s)
		if err != nil {
			return err
		}
		want := webhookMAC(key, id, ts, body)
		for _, sig := range strings.Fields(sigs) {
			version, b64, ok := strings.Cut(sig, ",")
			if !ok || version != "v1" {
				continue
			}
			got, err := base64.StdEncoding.DecodeString(b64)
			if err == nil && hmac.Equal(got, want) {
				return nil
			}
		}
	}
	return fmt.Errorf("%w: no signature matches", ErrWebhookSignature)
}

func webhookKey(secret string) ([]byte, error) {
	raw, ok := strings.CutPrefix(secret, "whsec_")
	key, err := base64.StdEncoding.DecodeString(raw)
	if !ok || err != nil || len(key) == 0 {
		return nil, errors.New("webhook: a secret looks like whsec_<base64>")
	}
	return key, nil
}

func webhookMAC(key []byte, id string, ts int64, body []byte) []byte {
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.", id, ts)
	mac.Write(body)
	return mac.Sum(nil)
}

// WebhookEvent is a delivered CloudEvent as gpuplane sends it.
type WebhookEvent struct {
	SpecVersion string    `json:"specversion"`
	ID          string    `json:"id"`     // the event id; the same on every retry and redelivery
	Source      string    `json:"source"` // e.g. /gpuplane
	Type        string    `json:"type"`   // e.g. dev.gpuplane.request.approved
	Subject     string    `json:"subject"`
	Time        time.Time `json:"time"`
	// Position orders the events of one object (and all events): a
	// receiver that saw a higher position for Subject may drop this one.
	Position string `json:"gpuplaneposition"`
	Data     struct {
		Actor         string          `json:"actor"`
		CorrelationID string          `json:"correlationId"`
		Team          string          `json:"team"`
		Department    string          `json:"department"`
		Object        json.RawMessage `json:"object"`   // the object after the change (REST JSON)
		Previous      json.RawMessage `json:"previous"` // before the change, when it existed
	} `json:"data"`
}

// WebhookHandler verifies each delivery and hands it to handle: 2xx when
// handle returns nil (gpuplane then stops retrying), 401 for a bad
// signature, 500 otherwise (gpuplane retries with backoff). The same event
// may arrive more than once (at-least-once): deduplicate on ID.
func WebhookHandler(handle func(r *http.Request, ev *WebhookEvent) error, secrets ...string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 4<<20))
		if err != nil {
			http.Error(w, "read body", http.StatusBadRequest)
			return
		}
		if err := VerifyWebhook(r.Header, body, time.Now(), 0, secrets...); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		var ev WebhookEvent
		if err := json.Unmarshal(body, &ev); err != nil {
			http.Error(w, "not a CloudEvent: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := handle(r, &ev); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
}
