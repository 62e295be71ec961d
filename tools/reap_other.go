//go:build !linux

package tools

import "context"

// ReapOrphans does nothing outside Linux, where the bot does not run as a
// container's init.
func ReapOrphans(ctx context.Context) {}
