// Package bodylimit bounds what is read of a response body that a client
// reads whole (or line by line) before it uses any of it, so that a server
// cannot fill the reader's memory.
package bodylimit

import (
	"bytes"
	"io"
)

// Body reads an io.ReadCloser up to Total bytes in all and, if MaxLine is
// set, MaxLine bytes per line; past either bound a read fails with the
// error TooLarge makes (line is set for a line past MaxLine). A body of
// exactly Total bytes is read whole.
type Body struct {
	io.ReadCloser
	Total, MaxLine int64
	TooLarge       func(line bool) error

	read, line int64
}

func (b *Body) Read(p []byte) (int, error) {
	if b.read >= b.Total {
		// Exactly at the bound: only more is too much.
		var one [1]byte
		if n, err := b.ReadCloser.Read(one[:]); n == 0 && err != nil {
			return 0, err
		}
		return 0, b.TooLarge(false)
	}
	p = p[:min(int64(len(p)), b.Total-b.read)]
	n, err := b.ReadCloser.Read(p)
	b.read += int64(n)
	if b.MaxLine > 0 {
		for rest := p[:n]; ; {
			i := bytes.IndexByte(rest, '\n')
			if i < 0 {
				b.line += int64(len(rest))
				break
			}
			if b.line+int64(i) > b.MaxLine {
				b.line += int64(i)
				break
			}
			b.line, rest = 0, rest[i+1:]
		}
		if b.line > b.MaxLine {
			return 0, b.TooLarge(true)
		}
	}
	return n, err
}
