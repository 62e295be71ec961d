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

// Compacted returns a map holding m's entries, made for size of them. A
// map whose entries come and go, one in as the oldest goes out (the map
// of a ring), grows past what its count needs as the slots of deleted
// entries pile up (by half again after a burst of 100,000); one made
// afresh each time its ring comes round keeps to what its count needs.
func Compacted[V any](m map[Key]V, size int) map[Key]V {
	fresh := make(map[Key]V, size)
	for k, v := range m {
		fresh[k] = v
	}
	return fresh
}
