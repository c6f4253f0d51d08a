// Package jsonshape writes and reads the JSON shape of the API's resources
// without the generated protobuf code, which the domain packages may not
// import (it links gRPC). Audit events store a snapshot of each changed
// resource exactly as the API renders it (protojson with proto field names)
// and some columns hold protojson documents (request payloads, conditions);
// the domain produces the same JSON through these helpers:
//
//   - Int64: int64 as a JSON string, as protojson writes it;
//   - Time: RFC 3339 in UTC with 0, 3, 6 or 9 fractional digits;
//   - Quota: the Quota message;
//   - CamelKeys / SnakeKeys: protojson's default (lowerCamelCase) names
//     versus the proto names (snake_case) used in audit snapshots.
//
// internal/server/api pins every shape to protojson's output in a test.
package jsonshape

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/gpuplane/gpuplane/internal/errs"
	"github.com/gpuplane/gpuplane/internal/quota"
)

// Int64 is an int64 that JSON carries as a string ("42"), like protojson.
// With omitempty, zero is left out, as protojson leaves out default values.
type Int64 int64

// MarshalJSON implements json.Marshaler.
func (n Int64) MarshalJSON() ([]byte, error) {
	return []byte(`"` + strconv.FormatInt(int64(n), 10) + `"`), nil
}

// UnmarshalJSON accepts a string or a number.
func (n *Int64) UnmarshalJSON(b []byte) error {
	s := string(bytes.Trim(b, `"`))
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return fmt.Errorf("jsonshape: int64 %s: %w", b, err)
	}
	*n = Int64(v)
	return nil
}

// Time is a timestamp in protojson's format.
type Time struct{ time.Time }

// At returns a *Time for t, nil for nil (an unset Timestamp field).
func At(t *time.Time) *Time {
	if t == nil {
		return nil
	}
	return &Time{*t}
}

// MarshalJSON implements json.Marshaler.
func (t Time) MarshalJSON() ([]byte, error) { return []byte(`"` + FormatTime(t.Time) + `"`), nil }

// UnmarshalJSON reads RFC 3339.
func (t *Time) UnmarshalJSON(b []byte) error {
	v, err := time.Parse(time.RFC3339Nano, string(bytes.Trim(b, `"`)))
	if err != nil {
		return fmt.Errorf("jsonshape: timestamp %s: %w", b, err)
	}
	t.Time = v
	return nil
}

// FormatTime renders t as protojson renders a google.protobuf.Timestamp.
func FormatTime(t time.Time) string {
	t = t.UTC()
	s := t.Format("2006-01-02T15:04:05")
	switch ns := t.Nanosecond(); {
	case ns == 0:
	case ns%1_000_000 == 0:
		s += fmt.Sprintf(".%03d", ns/1_000_000)
	case ns%1_000 == 0:
		s += fmt.Sprintf(".%06d", ns/1_000)
	default:
		s += fmt.Sprintf(".%09d", ns)
	}
	return s + "Z"
}

// Quota is the API's Quota message.
type Quota struct {
	GPU         string `json:"gpu,omitempty"`
	CPUMillis   Int64  `json:"cpu_millis,omitempty"`
	MemoryBytes Int64  `json:"memory_bytes,omitempty"`
}

// QuotaOf renders r (always a message, as the API always sets quotas).
func QuotaOf(r quota.Resources) *Quota {
	return &Quota{GPU: r.GPU.String(), CPUMillis: Int64(r.CPUMillis), MemoryBytes: Int64(r.MemoryBytes)}
}

// QuotaPtr renders an optional quota (nil stays unset).
func QuotaPtr(r *quota.Resources) *Quota {
	if r == nil {
		return nil
	}
	return QuotaOf(*r)
}

// Resources reads a stored quota back; nil is zero. Stored quotas were
// validated when written, so a GPU amount that does not parse is an error.
func (q *Quota) Resources() (quota.Resources, error) {
	var r quota.Resources
	if q == nil {
		return r, nil
	}
	if q.GPU != "" {
		g, err := quota.ParseGPU(q.GPU)
		if err != nil {
			return r, fmt.Errorf("jsonshape: stored gpu %q: %w", q.GPU, err)
		}
		r.GPU = g
	}
	r.CPUMillis, r.MemoryBytes = int64(q.CPUMillis), int64(q.MemoryBytes)
	return r, nil
}

// CamelKeys renames every object key of a JSON document from proto names
// (snake_case) to protojson's default JSON names (lowerCamelCase).
func CamelKeys(doc []byte) ([]byte, error) { return renameKeys(doc, camel) }

// CamelMap is CamelKeys for a decoded document: the API renders audit
// snapshots, stored with proto names, with JSON names (old rows and new
// alike, so nothing needs migrating).
func CamelMap(doc map[string]any) map[string]any {
	if doc == nil {
		return nil
	}
	return walk(doc, camel).(map[string]any)
}

// SnakeKeys is the inverse of CamelKeys.
func SnakeKeys(doc []byte) ([]byte, error) { return renameKeys(doc, snake) }

// SnakeKeysForDecode is SnakeKeys for a document about to be decoded
// (json.Unmarshal): the keys are renamed where they stand, in one pass over
// the bytes, so the result keeps the input's key order and spacing instead
// of SnakeKeys' sorted, compact form, which a decoder does not care about.
// Every stored payload and condition list is read through it, on every row
// read, where SnakeKeys' decode and re-encode cost more than the query.
func SnakeKeysForDecode(doc []byte) ([]byte, error) {
	if !json.Valid(doc) {
		return renameKeys(doc, snake) // the decoder's error, as before
	}
	out := make([]byte, 0, len(doc)+len(doc)/4)
	for i := 0; i < len(doc); {
		if doc[i] != '"' {
			out = append(out, doc[i])
			i++
			continue
		}
		end, escaped := i+1, false
		for doc[end] != '"' { // valid JSON: every string ends
			if doc[end] == '\\' {
				escaped = true
				end++
			}
			end++
		}
		next := end + 1
		for next < len(doc) && (doc[next] == ' ' || doc[next] == '\t' || doc[next] == '\n' || doc[next] == '\r') {
			next++
		}
		switch {
		case next == len(doc) || doc[next] != ':':
			out = append(out, doc[i:end+1]...) // a value
		case escaped:
			// A key spelled with escapes: leave decoding it to the
			// general path.
			return renameKeys(doc, snake)
		default:
			out = append(out, '"')
			out = append(out, snake(string(doc[i+1:end]))...)
			out = append(out, '"')
		}
		i = end + 1
	}
	return out, nil
}

func renameKeys(doc []byte, rename func(string) string) ([]byte, error) {
	var v any
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return json.Marshal(walk(v, rename))
}

func walk(v any, rename func(string) string) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[rename(k)] = walk(e, rename)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = walk(e, rename)
		}
		return x
	}
	return v
}

func camel(s string) string { return errs.JSONFieldPath(s) }

func snake(s string) string { return errs.ProtoFieldPath(s) }
