// Package fastjson decodes and encodes JSON as encoding/json does,
// several times faster. To decode, github.com/segmentio/encoding/json,
// which is tested to decode as the standard library does, decodes first,
// and input it refuses is decoded again by encoding/json, so that an
// error, and what a failed decode leaves in v, are the standard library's
// (whose messages never quote the input, which may be a person's or the
// model's words). Raw messages come out byte for byte, as encoding/json
// gives them, which the approval path depends on (the arguments approved
// are the arguments run). To encode, see Marshal.
//
// It is used on the paths a person waits on: decoding records and
// envelopes (a paused run's history, an envelope carrying a whole card),
// encoding states, model requests and Slack messages.
package fastjson

import (
	"encoding/json"
	"reflect"
	"sync"

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

// Marshal is json.Marshal without HTML escaping (what a json.Encoder with
// SetEscapeHTML(false) writes, without its newline): segmentio's encoder,
// which takes what MarshalJSON methods return as it is once it has checked
// it, where encoding/json re-scans it to compact it, most of the work of
// encoding values such as a conversation's messages or a card's blocks,
// whose methods encode through encoding/json. Map keys are sorted, as
// encoding/json sorts them. The JSON is built in a buffer kept for the next
// call, and copied out at its size.
func Marshal(v any) ([]byte, error) {
	buf := buffers.Get().(*[]byte)
	defer buffers.Put(buf)
	b, err := segment.Append((*buf)[:0], v, segment.SortMapKeys)
	if cap(b) <= maxKeptBuffer {
		*buf = b
	}
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}

// buffers keeps Marshal's buffers, each up to maxKeptBuffer.
var buffers = sync.Pool{New: func() any { return new([]byte) }}

const maxKeptBuffer = 1 << 20
