//go:build !unix

package tools

import "io/fs"

// hardLinked is false where the links of a file are not told.
func hardLinked(fs.FileInfo) bool { return false }
