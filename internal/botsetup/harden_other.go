//go:build !linux

package botsetup

// Harden does nothing outside Linux, where the programs the bot starts
// cannot read its environment through /proc.
func Harden() error { return nil }
