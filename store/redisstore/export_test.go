package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// IndexKeys are the keys of the due and pending-call indexes, for tests
// that look for entries left behind.
func (s *Store) IndexKeys() []string { return []string{s.dueKey(), s.pendingKey()} }

// AuditKey is the audit log's key.
func (s *Store) AuditKey() string { return s.auditKey() }

// PausesChannel and LeaseChannel are the pub/sub channels the store
// announces pauses and the releases of the lease on key on.
func (s *Store) PausesChannel() string          { return s.pausesChannel() }
func (s *Store) LeaseChannel(key string) string { return s.leaseChannel(key) }

// LoadDecisionScripts loads the scripts of a decision and of the resume it
// begins on every primary, so that a test counting round trips counts no
// NOSCRIPT fallback.
func LoadDecisionScripts(ctx context.Context, c redis.UniversalClient) error {
	load := func(ctx context.Context, c *redis.Client) error {
		for _, sc := range []*redis.Script{decide, decideIf, decideHeld, approve, approveIf, approveHeld, decidedResume, beginResume, acquireLease, releaseLease} {
			if err := sc.Load(ctx, c).Err(); err != nil {
				return err
			}
		}
		return nil
	}
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, load)
	}
	return load(ctx, c.(*redis.Client))
}

// SetLeaseSubscribeWait sets how long the making of the lease
// subscription may take.
func (s *Store) SetLeaseSubscribeWait(d time.Duration) { s.leases.subscribeWait = d }

// ResumeScriptHashes are the SHA-1s of the scripts that begin a resume:
// the one sent beside a decision on a single node, and BeginResume's.
func ResumeScriptHashes() (decided, begin string) { return decidedResume.Hash(), beginResume.Hash() }

// RecordsKey is the key of the hash that holds the records of kind.
func (s *Store) RecordsKey(kind string) string { return s.recordsKey(kind) }

// LoadSaveResultScript loads SaveResult's script on every primary.
func LoadSaveResultScript(ctx context.Context, c redis.UniversalClient) error {
	load := func(ctx context.Context, c *redis.Client) error { return saveResult.Load(ctx, c).Err() }
	if cc, ok := c.(*redis.ClusterClient); ok {
		return cc.ForEachMaster(ctx, load)
	}
	return load(ctx, c.(*redis.Client))
}

// RemindKey is the key of the reminder index.
func (s *Store) RemindKey() string { return s.remindKey() }

// ClientOf is the client of the Store's commands other than renewals.
func ClientOf(s *Store) redis.UniversalClient { return s.c }

// LeaseKey is the Redis key of the lease on key.
func LeaseKey(s *Store, key string) string { return s.leaseKey(key) }

// RenewalsWaiting counts the renewals waiting for a batch, all nodes'.
func RenewalsWaiting(s *Store) int {
	s.renewer.mu.Lock()
	defer s.renewer.mu.Unlock()
	n := 0
	for _, q := range s.renewer.queues {
		n += len(q.waiting)
	}
	return n
}

// RenewalsClient is the client renewals are sent on.
func RenewalsClient(s *Store) redis.UniversalClient { return s.renewalClient() }

// CallKey returns the key of call id's hash.
func (s *Store) CallKey(id string) string { return s.callKey(id) }
