// Package fastjson decodes JSON as encoding/json does, several times
// faster: github.com/segmentio/encoding/json, which is tested to decode as
// the standard library does, decodes first, and input it refuses is
// decoded again by encoding/json, so that an error, and what a failed
// decode leaves in v, are the standard library's (whose messages never
// quote the input, which may be a person's or the model's words).
//
// It is used where records and envelopes are decoded on a path a person
// waits on: a paused run's history, an envelope carrying a whole card.
// Raw messages come out byte for byte, as encoding/json gives them, which
// the approval path depends on (the arguments approved are the arguments
// run).
package fastjson

import (
	"encoding/json"

	segment "github.com/segmentio/encoding/json"
)

// Unmarshal is json.Unmarshal. Input that is not valid JSON goes to
// encoding/json at once, which leaves v as it was (segmentio's decoder
// may have set some of it before finding the error).
func Unmarshal(data []byte, v any) error {
	if segment.Valid(data) && segment.Unmarshal(data, v) == nil {
		return nil
	}
	return json.Unmarshal(data, v)
}
