package virtualcluster

import (
	"encoding/json"
	"time"

	"github.com/gpuplane/gpuplane/internal/jsonshape"
)

// ConditionStatus is the API's Condition.Status name.
type ConditionStatus string

// Condition statuses.
const (
	ConditionTrue    ConditionStatus = "TRUE"
	ConditionFalse   ConditionStatus = "FALSE"
	ConditionUnknown ConditionStatus = "UNKNOWN"
)

// Condition is one thing that must hold for a virtual cluster to be READY.
type Condition struct {
	Type               string
	Status             ConditionStatus
	Reason, Message    string
	ObservedGeneration int64
	LastTransitionTime time.Time
}

// IsTrue reports whether the condition holds.
func (c Condition) IsTrue() bool { return c.Status == ConditionTrue }

// conditionJSON is the API's Condition message.
type conditionJSON struct {
	Type               string          `json:"type,omitempty"`
	Status             ConditionStatus `json:"status,omitempty"`
	Reason             string          `json:"reason,omitempty"`
	Message            string          `json:"message,omitempty"`
	LastTransitionTime *jsonshape.Time `json:"last_transition_time,omitempty"`
	ObservedGeneration jsonshape.Int64 `json:"observed_generation,omitempty"`
}

func conditionsJSON(cs []Condition) []conditionJSON {
	out := make([]conditionJSON, 0, len(cs))
	for _, c := range cs {
		j := conditionJSON{Type: c.Type, Status: c.Status, Reason: c.Reason, Message: c.Message,
			ObservedGeneration: jsonshape.Int64(c.ObservedGeneration)}
		if !c.LastTransitionTime.IsZero() {
			j.LastTransitionTime = &jsonshape.Time{Time: c.LastTransitionTime}
		}
		out = append(out, j)
	}
	return out
}

// EncodeConditions renders conditions for the conditions column: a JSON
// array of protojson Condition objects (lowerCamelCase names), the format
// rows have always had.
func EncodeConditions(cs []Condition) ([]byte, error) {
	raw, err := json.Marshal(conditionsJSON(cs))
	if err != nil {
		return nil, err
	}
	return jsonshape.CamelKeys(raw)
}

// DecodeConditions parses the conditions column.
func DecodeConditions(raw []byte) ([]Condition, error) {
	if len(raw) == 0 {
		return []Condition{}, nil
	}
	snake, err := jsonshape.SnakeKeysForDecode(raw)
	if err != nil {
		return nil, err
	}
	var items []conditionJSON
	if err := json.Unmarshal(snake, &items); err != nil {
		return nil, err
	}
	out := make([]Condition, 0, len(items))
	for _, j := range items {
		c := Condition{Type: j.Type, Status: j.Status, Reason: j.Reason, Message: j.Message, ObservedGeneration: int64(j.ObservedGeneration)}
		if j.LastTransitionTime != nil {
			c.LastTransitionTime = j.LastTransitionTime.Time
		}
		out = append(out, c)
	}
	return out, nil
}
