//go:build !(linux || darwin || freebsd || openbsd || netbsd || dragonfly)

package boltstore

// discardUnfinished leaves the file at path as it is where it cannot be
// locked as bbolt locks it: a creation cut short is reported damaged.
func discardUnfinished(path string) (bool, error) { return false, nil }
