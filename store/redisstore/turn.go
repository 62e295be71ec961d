package redisstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
)

// beginTurn takes or renews the lease on a conversation's turns and, if it
// got it, reads the conversation and its inbox.
// KEYS: lease, conversation, inbox
// ARGV: owner, ttl (ms)
// Returns {0} if another owner holds the lease, else {1, the
// conversation's fields and values, the inbox}.
var beginTurn = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return {0} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {1, redis.call('HGETALL', KEYS[2]), redis.call('LRANGE', KEYS[3], 0, -1)}
`)

// commitTurn saves a conversation, drops answered messages from its inbox
// and releases the lease on its turns, each when asked.
// KEYS: conversation, inbox, lease [, unanswered index]
// ARGV: save (1/0), key, state, paused run, updated at, conversation ttl
// (ms), answer up to (seq, empty: none), release owner (empty: none), release
// channel
// Returns how many messages the inbox holds, or -1 when none was answered.
// Given the index of unanswered conversations (a single node, where a
// script reaches every key), an inbox left empty by the answer takes the
// conversation (ARGV[2]) out of it in the same step.
var commitTurn = redis.NewScript(`
if ARGV[1] == '1' then
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'key', ARGV[2], 'state', ARGV[3], 'paused_run', ARGV[4], 'updated_at', ARGV[5])
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
end
local left = -1
if ARGV[7] ~= '' then
  local upTo = tonumber(ARGV[7])
  while true do
    local v = redis.call('LINDEX', KEYS[2], 0)
    if not v then break end
    local seq = tonumber(string.match(v, '^{"seq":(%d+)'))
    if seq and seq > upTo then break end
    redis.call('LPOP', KEYS[2])
  end
  left = redis.call('LLEN', KEYS[2])
  if left == 0 and #KEYS >= 4 then redis.call('ZREM', KEYS[4], ARGV[2]) end
end
if ARGV[8] ~= '' and redis.call('GET', KEYS[3]) == ARGV[8] then
  redis.call('DEL', KEYS[3])
  redis.call('PUBLISH', ARGV[9], '1')
end
return left
`)

// unlistIfAnswered takes a conversation out of the index of unanswered
// ones if its inbox is empty (a single node only: the two keys are in
// different hash slots).
// KEYS: inbox, unanswered index
// ARGV: conversation
var unlistIfAnswered = redis.NewScript(`
if redis.call('LLEN', KEYS[1]) == 0 then redis.call('ZREM', KEYS[2], ARGV[1]) end
return 0
`)

// BeginTurn is one script on the conversation's hash slot, pipelined with
// the listings of the records asked for (one round trip). See
// storetest.Store for the contract.
func (s *Store) BeginTurn(ctx context.Context, conversation, owner string, ttl time.Duration, kinds ...string) (store.Begun, error) {
	if ttl < time.Millisecond {
		return store.Begun{}, fmt.Errorf("begin turn of %s: ttl %v is under 1ms", conversation, ttl)
	}
	keys := []string{s.leaseKey(store.TurnLease(conversation)), s.convKey(conversation), s.inboxKey(conversation)}
	var cmd *redis.Cmd
	recs := make([]*redis.MapStringStringCmd, len(kinds))
	if len(kinds) == 0 {
		cmd = beginTurn.Run(ctx, s.c, keys, owner, ttl.Milliseconds())
	} else {
		// Each command's error is checked apart: records that cannot be
		// read are left out, the rest stands.
		_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
			// Eval, not Run: a pipeline cannot fall back from EVALSHA.
			cmd = beginTurn.Eval(ctx, p, keys, owner, ttl.Milliseconds())
			for i, k := range kinds {
				recs[i] = p.HGetAll(ctx, s.recordsKey(k))
			}
			return nil
		})
	}
	res, err := cmd.Slice()
	if err != nil {
		return store.Begun{}, fmt.Errorf("begin turn of %s: %w", conversation, err)
	}
	if n, _ := res[0].(int64); n != 1 {
		return store.Begun{}, nil
	}
	if len(res) != 3 {
		return store.Begun{}, fmt.Errorf("begin turn of %s: unexpected reply %v", conversation, res)
	}
	b := store.Begun{Acquired: true, Records: records(kinds, recs)}
	fields, _ := res[1].([]any)
	if len(fields) > 0 {
		m := make(map[string]string, len(fields)/2)
		for i := 0; i+1 < len(fields); i += 2 {
			k, _ := fields[i].(string)
			v, _ := fields[i+1].(string)
			m[k] = v
		}
		if b.Conversation, err = decodeConversation(conversation, m); err != nil {
			return store.Begun{}, fmt.Errorf("begin turn of %s: %w", conversation, err)
		}
		b.Found = true
	}
	msgs, _ := res[2].([]any)
	for _, v := range msgs {
		raw, _ := v.(string)
		var m store.Inbound
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			return store.Begun{}, fmt.Errorf("begin turn of %s: inbox: %w", conversation, err)
		}
		b.Inbox = append(b.Inbox, m)
	}
	return b, nil
}

// CommitTurn writes in this order, so that a failure or a crash part way
// leaves what a later turn can carry on from: the run (one script on its
// hash slot), then in one pipeline its index entries, the audit entries
// and one script on the conversation's hash slot (the conversation, its
// inbox and its lease), then the finished run (one script), then in one
// pipeline the finished run's index entries dropped and the conversation
// unlisted if its inbox is empty, then a check of the inbox that lists it
// again if a message arrived meanwhile (as AnswerInbox). A run that cannot
// be created stops the commit before anything else is written. That is
// four round trips for a pause or the end of a resume. See storetest.Store
// for the contract.
func (s *Store) CommitTurn(ctx context.Context, c store.Commit) error {
	var run store.Run
	var calls []store.Call
	if c.Run != nil {
		var err error
		if run, calls, err = s.createRun(ctx, *c.Run, c.Calls); err != nil {
			return fmt.Errorf("commit turn of %s: %w", c.Key, err)
		}
	}
	p := s.c.Pipeline()
	if c.Run != nil {
		s.indexRun(ctx, p, run, calls)
	}
	for _, e := range c.Audit {
		if err := s.pushAudit(ctx, p, e); err != nil {
			return fmt.Errorf("commit turn of %s: audit %s: %w", c.Key, e.Action, err)
		}
	}
	keys := []string{s.convKey(c.Key), s.inboxKey(c.Key), s.leaseKey(store.TurnLease(c.Key))}
	// On a single node the script unlists the conversation itself, at
	// once, unless a run is finished first (see above).
	unlisted := !s.cluster && c.Finish == ""
	if unlisted {
		keys = append(keys, s.unansweredKey())
	}
	args := []any{"0", c.Key, "", "", "", s.convTTL.Milliseconds(), "", c.Release, s.leaseChannel(store.TurnLease(c.Key))}
	if c.Answer {
		args[6] = c.AnswerUpTo
	}
	if conv := c.Conversation; conv != nil {
		at := conv.UpdatedAt
		if at.IsZero() {
			at = time.Now()
		}
		args[0], args[2], args[3], args[4] = "1", []byte(conv.State), conv.PausedRun, at.Format(time.RFC3339Nano)
	}
	var tail *redis.StringCmd
	if len(c.Audit) > 0 {
		tail = p.LIndex(ctx, s.auditKey(), -1)
	}
	commit := commitTurn.EvalSha(ctx, p, keys, args...)
	cmds, err := p.Exec(ctx)
	if errors.Is(err, redis.Nil) {
		err = nil // the audit log's tail, read after the entries were added
	}
	if redis.HasErrorPrefix(commit.Err(), "NOSCRIPT") {
		// The script was not loaded, so it did not run: run it alone
		// unless another command failed.
		err = nil
		for _, cmd := range cmds {
			if cmd != redis.Cmder(commit) && cmd.Err() != nil {
				err = cmd.Err()
				break
			}
		}
		if err == nil {
			commit = commitTurn.Run(ctx, s.c, keys, args...)
			err = commit.Err()
		}
	}
	if err != nil {
		return fmt.Errorf("commit turn of %s: %w", c.Key, err)
	}
	left, err := commit.Int64()
	if err != nil {
		return fmt.Errorf("commit turn of %s: %w", c.Key, err)
	}
	var unindex func(redis.Pipeliner)
	if c.Finish != "" {
		if unindex, err = s.finishRun(ctx, c.Finish); err != nil && !errors.Is(err, store.ErrNotFound) {
			return fmt.Errorf("commit turn of %s: %w", c.Key, err)
		}
	}
	unlist := left == 0 && !unlisted
	if unindex != nil || unlist {
		p := s.c.Pipeline()
		if unindex != nil {
			unindex(p)
		}
		switch {
		case unlist && !s.cluster:
			// One script on a single node: unlisted only if the inbox is
			// still empty, so there is nothing to list again.
			unlistIfAnswered.Eval(ctx, p, []string{s.inboxKey(c.Key), s.unansweredKey()}, c.Key)
		case unlist:
			p.ZRem(ctx, s.unansweredKey(), c.Key)
		}
		if _, err := p.Exec(ctx); err != nil {
			return fmt.Errorf("commit turn of %s: index: %w", c.Key, err)
		}
		if unlist && s.cluster {
			if err := s.relist(ctx, c.Key); err != nil {
				return fmt.Errorf("commit turn of %s: %w", c.Key, err)
			}
		}
	}
	if cutoff := time.Now().Add(-s.auditTTL); tail != nil && tail.Err() == nil && staleAudit(tail.Val(), cutoff) {
		if err := s.trimAudit(ctx, cutoff); err != nil {
			return fmt.Errorf("commit turn of %s: %w", c.Key, err)
		}
	}
	return nil
}
