package redisstore

// IndexKeys are the keys of the due and pending-call indexes, for tests
// that look for entries left behind.
func (s *Store) IndexKeys() []string { return []string{s.dueKey(), s.pendingKey()} }

// PausesChannel and LeaseChannel are the pub/sub channels the store
// announces pauses and the releases of the lease on key on.
func (s *Store) PausesChannel() string          { return s.pausesChannel() }
func (s *Store) LeaseChannel(key string) string { return s.leaseChannel(key) }
