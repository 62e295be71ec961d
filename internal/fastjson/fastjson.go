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
	"reflect"

	segment "github.com/segmentio/encoding/json"
)

// Unmarshal is json.Unmarshal. Only a zero value is decoded by
// segmentio's decoder, and set back to zero when it refuses the input
// (it may have set part of it before finding the error), which leaves it
// as encoding/json would; anything else, such as a struct with fields set
// beforehand, is decoded by encoding/json alone, as segmentio's decoder
// writes into the maps, slices and pointers a value already holds.
func Unmarshal(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || !rv.Elem().IsZero() {
		return json.Unmarshal(data, v)
	}
	if segment.Unmarshal(data, v) == nil {
		return nil
	}
	rv.Elem().SetZero()
	return json.Unmarshal(data, v)
}
