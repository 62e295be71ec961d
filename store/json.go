package store

import (
	"bytes"
	"encoding/json"
)

// EncodeJSON encodes v as json.Marshal does, but without HTML escaping:
// json.Marshal rewrites '<', '>' and '&' inside a json.RawMessage as
// \u003c, \u003e and \u0026, so arguments stored through it would come
// back, be shown and be run as other bytes than the ones approved. Stores
// encode every record with EncodeJSON so raw JSON round-trips byte for
// byte.
func EncodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
