//go:build linux || darwin || freebsd || openbsd || netbsd || dragonfly

package boltstore

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"
)

// minFile is the size of the file bbolt writes when it creates one: two
// meta pages, the free list and the root, of 4 KiB at least, in one write.
const minFile = 4 * 4096

// boltMagic is the magic number of bbolt's meta pages.
const boltMagic = 0xED0CDAED

// discardUnfinished empties the file at path if it is the start of a
// bbolt file shorter than minFile: a creation cut short (by a full disk), which holds nothing,
// since bbolt commits nothing before the four pages are written, and which
// bbolt would read past. bolt.Open then creates it afresh. The file is
// locked as bbolt locks it first, so a process that holds it, creating it
// this moment, is left alone (bolt.Open then waits for it as ever).
// It reports whether it did.
func discardUnfinished(path string) (bool, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return false, nil // none yet, or bolt.Open reports why it cannot open it
	}
	defer f.Close() // which unlocks it
	if fi, err := f.Stat(); err != nil || fi.Size() == 0 || fi.Size() >= minFile {
		return false, nil
	}
	// Only the start of a bbolt file: its first meta page's magic number,
	// after the page's header. Any other file is left to bolt.Open to
	// refuse.
	var head [20]byte
	if _, err := f.ReadAt(head[:], 0); err != nil || binary.NativeEndian.Uint32(head[16:]) != boltMagic {
		return false, nil
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return false, nil
	}
	if err := f.Truncate(0); err != nil {
		return false, fmt.Errorf("empty the file, whose creation was cut short: %w", err)
	}
	return true, nil
}
