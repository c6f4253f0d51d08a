package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"

	"github.com/gpuplane/gpuplane/internal/events"
	"github.com/gpuplane/gpuplane/internal/jsonshape"
	"github.com/gpuplane/gpuplane/internal/names"
)

// Standard Webhooks (https://www.standardwebhooks.com): the headers and
// the secret format. pkg/client's VerifyWebhook is the receiving side.
const (
	HeaderID        = "webhook-id"
	HeaderTimestamp = "webhook-timestamp"
	HeaderSignature = "webhook-signature"
	SecretPrefix    = "whsec_"
	// ContentType of a structured-mode CloudEvent.
	ContentType = "application/cloudevents+json; charset=utf-8"
	// TypePrefix turns an event type into a CloudEvents type
	// ("request.approved" -> "dev.gpuplane.request.approved").
	TypePrefix = "dev.gpuplane."
	// PositionExtension is the CloudEvents extension attribute carrying the
	// event's position in the feed (a string: CloudEvents integers are 32-bit).
	PositionExtension = "gpuplaneposition"
)

// Data is the CloudEvent's data: the object after the change (its last
// state when deleted), as the REST API renders it (lowerCamelCase), the
// object before, who made the change and the scope.
type Data struct {
	Actor         string          `json:"actor"`
	CorrelationID string          `json:"correlationId,omitempty"`
	Team          string          `json:"team,omitempty"`
	Department    string          `json:"department,omitempty"`
	Object        json.RawMessage `json:"object,omitempty"`
	Previous      json.RawMessage `json:"previous,omitempty"`
}

// CloudEvent builds the structured-mode CloudEvent of e; the same event
// always gives the same bytes, on every attempt and redelivery.
func CloudEvent(source string, e *events.Event) ([]byte, error) {
	d := Data{Actor: e.Actor, CorrelationID: e.CorrelationID}
	if e.Team != "" {
		d.Team = names.Team(e.Team)
	}
	if e.Department != "" {
		d.Department = names.Department(e.Department)
	}
	var err error
	if d.Object, err = camel(e.Object()); err != nil {
		return nil, err
	}
	if len(e.After) > 0 {
		if d.Previous, err = camel(e.Before); err != nil {
			return nil, err
		}
	}
	ce := cloudevents.New(cloudevents.CloudEventsVersionV1)
	ce.SetID(strconv.FormatInt(e.ID, 10))
	ce.SetSource(source)
	ce.SetType(TypePrefix + e.Type)
	ce.SetSubject(e.Resource)
	ce.SetTime(e.Time.UTC())
	ce.SetExtension(PositionExtension, strconv.FormatInt(e.Position, 10))
	if err := ce.SetData(cloudevents.ApplicationJSON, d); err != nil {
		return nil, err
	}
	if err := ce.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(ce)
}

func camel(raw json.RawMessage) (json.RawMessage, error) {
	if len(raw) == 0 {
		return nil, nil
	}
	return jsonshape.CamelKeys(raw)
}

// Sign computes the webhook-signature header: one "v1,<base64 HMAC-SHA256
// of id.timestamp.body>" per secret, space-separated.
func Sign(secrets []string, id string, ts time.Time, body []byte) (string, error) {
	sigs := make([]string, 0, len(secrets))
	for _, s := range secrets {
		key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(s, SecretPrefix))
		if err != nil || !strings.HasPrefix(s, SecretPrefix) {
			return "", errors.New("webhook: malformed secret")
		}
		mac := hmac.New(sha256.New, key)
		fmt.Fprintf(mac, "%s.%d.", id, ts.Unix())
		mac.Write(body)
		sigs = append(sigs, "v1,"+base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	return strings.Join(sigs, " "), nil
}

// SetHeaders sets the Standard Webhooks headers of one attempt.
func SetHeaders(h http.Header, secrets []string, id string, ts time.Time, body []byte) error {
	sig, err := Sign(secrets, id, ts, body)
	if err != nil {
		return err
	}
	h.Set("Content-Type", ContentType)
	h.Set(HeaderID, id)
	h.Set(HeaderTimestamp, strconv.FormatInt(ts.Unix(), 10))
	h.Set(HeaderSignature, sig)
	return nil
}
