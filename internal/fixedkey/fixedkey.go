// Package fixedkey turns short ids into fixed-size values, for maps and
// rings that remember many ids for a long time: a fixed-size key is held
// in place, so remembering an id allocates nothing that outlives it.
package fixedkey

import "strings"

// Key is an id of at most 32 bytes, padded with NULs.
type Key [32]byte

// Of returns id as a Key; ok is false for an empty id, one longer than a
// Key, and one holding a NUL (which would be ambiguous with the padding).
func Of(id string) (k Key, ok bool) {
	if id == "" || len(id) > len(k) || strings.IndexByte(id, 0) >= 0 {
		return k, false
	}
	copy(k[:], id)
	return k, true
}
