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

// Unmarshal is json.Unmarshal. What v points to is kept aside first and
// put back before input segmentio's decoder refuses goes to
// encoding/json, since that decoder may have set part of it before
// finding the error (a shallow copy: the maps and slices it held are not
// kept aside, and none of this module's callers decode into full ones).
func Unmarshal(data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return json.Unmarshal(data, v)
	}
	saved := reflect.New(rv.Elem().Type()).Elem()
	saved.Set(rv.Elem())
	if segment.Unmarshal(data, v) == nil {
		return nil
	}
	rv.Elem().Set(saved)
	return json.Unmarshal(data, v)
}
