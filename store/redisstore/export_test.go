package redisstore

// IndexKeys are the keys of the due and pending-call indexes, for tests
// that look for entries left behind.
func (s *Store) IndexKeys() []string { return []string{s.dueKey(), s.pendingKey()} }
