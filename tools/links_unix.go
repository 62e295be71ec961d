//go:build unix

package tools

import (
	"io/fs"
	"syscall"
)

// hardLinked reports whether fi is a regular file with more names than
// one (hard links): another may be outside the workspace, which a link
// made by a command or a person would let a path of it read or write.
func hardLinked(fi fs.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.Mode().IsRegular() && st.Nlink > 1
}

// ownerOf returns the user and group that own the file of fi.
func ownerOf(fi fs.FileInfo) (uid, gid int, ok bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, 0, false
	}
	return int(st.Uid), int(st.Gid), true
}
