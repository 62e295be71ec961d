package redisstore

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/fastjson"
	"github.com/toolgate/toolgate/store"
)

// beginTurnFn is the Lua function begin(l, c, i, owner, ttl) that takes or
// renews the lease on a conversation's turns (KEYS[l]) for owner for ttl
// (ms) and, if it got it, reads the conversation (KEYS[c]) and its inbox
// (KEYS[i]). It returns {0} if another owner holds the lease, else {1, the
// conversation's fields and values, the inbox}.
const beginTurnFn = `
local function begin(l, c, i, owner, ttl)
  local v = redis.call('GET', KEYS[l])
  if v and v ~= owner then return {0} end
  redis.call('SET', KEYS[l], owner, 'PX', ttl)
  return {1, redis.call('HGETALL', KEYS[c]), redis.call('LRANGE', KEYS[i], 0, -1)}
end
`

// beginTurn is beginTurnFn as a script.
// KEYS: lease, conversation, inbox
// ARGV: owner, ttl (ms)
// Returns what begin returns.
var beginTurn = redis.NewScript(beginTurnFn + `
return begin(1, 2, 3, ARGV[1], ARGV[2])
`)

// commitTurnFn is the Lua function commit(k, a, unlist) that saves a
// conversation, drops answered messages from its inbox and releases the
// lease on its turns, each when asked.
// KEYS from k: conversation, inbox, lease, the sending's mark (see
// applied), unanswered index (with unlist)
// ARGV from a: save (1/0), key, state, paused run, updated at,
// conversation ttl (ms), answer up to (seq, empty: none), release owner
// (empty: none), release channel
// It returns how many messages the inbox holds, or -1 when none was
// answered. unlist is 'always' where the commit finishes the run the
// conversation was paused on; otherwise a conversation paused on a step
// that is decided and not resumed yet stays listed. With unlist (a single
// node, where a script reaches every key), an inbox left empty by the
// answer takes the conversation out of the index of unanswered ones in the
// same step.
// The function held(lease) reports whether the commit's holder, the
// script's last ARGV (empty: anyone), may write: it holds the lease (not
// another owner, and not nobody: a holder whose lease ran out may have been
// taken over, and the conversation finished, meanwhile).
// The sending's mark is a key of its own per sending (named by a nonce,
// in the conversation's hash slot): applied(mark) reports that this very
// sending was applied already (the client sent it again after its reply
// was lost), returning what commit returned then, and done(mark, left)
// records that for 30 s. A key per sending, not one per conversation: a
// commit of another owner made between the two sendings (the first
// released the lease) would overwrite a shared one, and the second
// sending, finding neither its mark nor its lease, would be refused
// although it was applied.
const commitTurnFn = `
local function held(lease)
  local h = ARGV[#ARGV]
  if h == '' then return true end
  return redis.call('GET', lease) == h
end
local function applied(mark)
  local v = redis.call('GET', mark)
  if not v then return nil end
  return tonumber(v)
end
local function done(mark, left)
  redis.call('SET', mark, left, 'PX', 30000)
end
local function commit(k, a, unlist)
  if ARGV[a] == '1' then
    redis.call('DEL', KEYS[k])
    redis.call('HSET', KEYS[k], 'key', ARGV[a + 1], 'state', ARGV[a + 2], 'paused_run', ARGV[a + 3], 'updated_at', ARGV[a + 4])
    redis.call('PEXPIRE', KEYS[k], ARGV[a + 5])
  end
  local left = -1
  if ARGV[a + 6] ~= '' then
    local upTo = tonumber(ARGV[a + 6])
    while true do
      local v = redis.call('LINDEX', KEYS[k + 1], 0)
      if not v then break end
      local seq = tonumber(string.match(v, '^{"seq":(%d+)'))
      if seq and seq > upTo then break end
      redis.call('LPOP', KEYS[k + 1])
    end
    left = redis.call('LLEN', KEYS[k + 1])
    if left == 0 and unlist then
      local keep = false
      local pr = unlist ~= 'always' and redis.call('HGET', KEYS[k], 'paused_run')
      if pr and pr ~= '' then
        -- Paused on a step decided and not resumed yet: the decision
        -- lists the conversation until the resume saves its result. The
        -- run's key is Store.runKey's, from the index's prefix.
        local v = redis.call('HMGET', string.sub(KEYS[k + 4], 1, -12) .. ':run:{' .. pr .. '}', 'pending', 'finished')
        keep = v[1] == '0' and v[2] ~= '1'
      end
      if not keep then redis.call('ZREM', KEYS[k + 4], ARGV[a + 1]) end
    end
  end
  if ARGV[a + 7] ~= '' and redis.call('GET', KEYS[k + 2]) == ARGV[a + 7] then
    redis.call('DEL', KEYS[k + 2])
    redis.call('PUBLISH', ARGV[a + 8], '1')
  end
  return left
end
`

// auditFn is the Lua function audit(key, a) that appends audit entries to
// the capped audit list key, from ARGV[a]: the number of entries e, the
// entries, the list's last index kept (see auditArgs). It returns the
// list's oldest entry (empty when none was written) and the index of the
// ARGV after them.
const auditFn = `
local function audit(key, a)
  local e = tonumber(ARGV[a])
  for i = 1, e do
    redis.call('LPUSH', key, ARGV[a + i])
    redis.call('LTRIM', key, 0, ARGV[a + e + 1])
  end
  local tail = ''
  if e > 0 then tail = redis.call('LINDEX', key, -1) or '' end
  return tail, a + e + 2
end
`

// auditArgs are the ARGV of auditFn for entries.
func (s *Store) auditArgs(entries []store.AuditEntry) ([]any, error) {
	args := make([]any, 0, len(entries)+2)
	args = append(args, len(entries))
	for _, e := range entries {
		b, err := auditJSON(e)
		if err != nil {
			return nil, fmt.Errorf("audit %s: %w", e.Action, err)
		}
		args = append(args, b)
	}
	return append(args, s.auditMax-1), nil
}

// commitTurn is commitTurnFn as a script on the conversation's hash slot,
// with the unanswered index as a fifth key on a single node. Given a run,
// it first marks the conversation as paused on it (a commit that creates
// a run of this conversation and saves no record of it): under the
// lease, with the rest.
// KEYS: conversation, inbox, lease, the sending's mark [, unanswered
// index]
// ARGV: as commitTurnFn (9), the announcement (empty: none) and its
// channel, the run to mark the conversation paused on (empty: none), then
// the holder (empty: none)
// Returns what commit returns, or -2 with nothing written when another
// owner holds the lease. The announcement is published once the rest is
// written.
var commitTurn = redis.NewScript(commitTurnFn + `
local prev = applied(KEYS[4])
if prev then return prev end
if not held(KEYS[3]) then return -2 end
if ARGV[12] ~= '' then
  redis.call('HSET', KEYS[1], 'key', ARGV[2], 'paused_run', ARGV[12])
  redis.call('PEXPIRE', KEYS[1], ARGV[6])
end
local left = commit(1, 1, #KEYS >= 5)
done(KEYS[4], left)
if ARGV[10] ~= '' then redis.call('PUBLISH', ARGV[11], ARGV[10]) end
return left
`)

// commitPause is CommitTurn of a turn that creates a run, in one script
// on a single node (where a script reaches every key): the run and its
// calls (createRunFn), their index entries and the conversation marked as
// paused on the run (as indexRun), the audit entries, then commitTurnFn.
// If the run exists it writes nothing.
// KEYS: run, call..., conversation, inbox, lease, the sending's mark,
// unanswered index, audit, then one key per index entry
// ARGV: the number of calls n, the createRunFn arguments (3 + 6n), the
// number of index entries m, per entry score (ms) and member, the run's
// conversation key (empty:
// none), the run id, the conversation ttl (ms), the number of audit entries
// e, the entries, the audit list's last index kept, the announcement
// (empty: none) and its channel, then the commitTurnFn arguments, then the
// holder (empty: none).
// Returns {'notheld'} (another owner holds the lease) or {'exists'}, with
// nothing written, or {'ok', inbox left (as commit), the audit list's
// oldest entry (empty with no entry written)}. The announcement is
// published once the rest is written.
var commitPause = redis.NewScript(createRunFn + commitTurnFn + auditFn + `
local n = tonumber(ARGV[1])
local prev = applied(KEYS[5 + n])
if prev then return {'ok', prev, redis.call('LINDEX', KEYS[7 + n], -1) or ''} end
if not held(KEYS[4 + n]) then return {'notheld'} end
if not createRun(1, 2, n) then return {'exists'} end
local deleteAt = ARGV[3]
local k = 2 + n
local a = 5 + 6 * n
local m = tonumber(ARGV[a])
for i = 1, m do
  local key = KEYS[k + 5 + i]
  local b = a + 1 + (i - 1) * 2
  redis.call('ZADD', key, ARGV[b], ARGV[b + 1])
  redis.call('PEXPIREAT', key, deleteAt, 'NX')
  redis.call('PEXPIREAT', key, deleteAt, 'GT')
end
a = a + 1 + 2 * m
if ARGV[a] ~= '' then
  redis.call('HSET', KEYS[k], 'key', ARGV[a], 'paused_run', ARGV[a + 1])
  redis.call('PEXPIRE', KEYS[k], ARGV[a + 2])
end
a = a + 3
local tail
tail, a = audit(KEYS[k + 5], a)
local announce, channel = ARGV[a], ARGV[a + 1]
local left = commit(k, a + 2, true)
done(KEYS[k + 3], left)
if announce ~= '' then redis.call('PUBLISH', channel, announce) end
return {'ok', left, tail}
`)

// commitFinish is CommitTurn of a commit that finishes a run and creates
// none, in one script on a single node: the audit entries, commitTurnFn,
// then the run finished as finishRun finishes it, its calls taken out of
// the indexes that list them (their idx fields), the run out of the runs
// index and the conversation's paused run cleared if it is this one (as
// clearPaused), and the conversation unlisted if its inbox is empty. A run
// created before runs kept their conversation's key (no conv field) is
// left to the general path: the script then writes nothing and returns
// {'legacy'}.
// The calls, the indexes that list them and the run's conversation are
// found from the run, their keys built by the script (the caller knows
// them only once the run is read): a single node, where no slot moves.
// KEYS: conversation, inbox, lease, the sending's mark, unanswered index,
// audit, run, claim, runs index
// ARGV: the number of audit entries e, the entries, the audit list's last
// index kept, the commitTurnFn arguments, the retention (ms), the run id,
// the holder (empty: none)
// Returns {'notheld'} (another owner holds the lease) or {'legacy'}, with
// nothing written, or {'ok', inbox left (as commit), the audit list's
// oldest entry (empty with no entry written)}.
var commitFinish = redis.NewScript(commitTurnFn + auditFn + `
local prev = applied(KEYS[4])
if prev then return {'ok', prev, redis.call('LINDEX', KEYS[6], -1) or ''} end
if not held(KEYS[3]) then return {'notheld'} end
local run = redis.call('HMGET', KEYS[7], 'run', 'finished', 'conv')
local finish = run[1] and run[2] ~= '1'
if finish and not run[3] then return {'legacy'} end
local tail, a = audit(KEYS[6], 1)
local left = commit(1, a, 'always')
a = a + 9
if finish then
  local ret, id = ARGV[a], ARGV[a + 1]
  redis.call('HSET', KEYS[7], 'finished', '1')
  redis.call('DEL', KEYS[8])
  redis.call('PEXPIRE', KEYS[7], ret, 'LT')
  local i = 0
  while true do
    local k = KEYS[7] .. ':call:' .. id .. '.' .. i
    local c = redis.call('HMGET', k, 'call', 'idx')
    if not c[1] then break end
    redis.call('PEXPIRE', k, ret, 'LT')
    if c[2] then
      for key in string.gmatch(c[2], '[^\n]+') do redis.call('ZREM', key, id .. '.' .. i) end
    end
    i = i + 1
  end
  redis.call('ZREM', KEYS[9], id)
  if run[3] ~= '' and redis.call('HGET', run[3], 'paused_run') == id then
    redis.call('HDEL', run[3], 'paused_run')
  end
end
done(KEYS[4], left)
return {'ok', left, tail}
`)

// unlistIfAnswered takes a conversation out of the index of unanswered
// ones if its inbox is empty and, given the run the commit paused on, that
// run's step is not decided and waiting for its resume (a decision made
// after the run was created and before this step lists the conversation
// until the resume saves its result; see relist). A single node only: the
// keys are in different hash slots.
// KEYS: inbox, unanswered index [, run]
// ARGV: conversation
var unlistIfAnswered = redis.NewScript(`
if redis.call('LLEN', KEYS[1]) ~= 0 then return 0 end
if KEYS[3] then
  local v = redis.call('HMGET', KEYS[3], 'pending', 'finished')
  if v[1] == '0' and v[2] ~= '1' then return 0 end
end
redis.call('ZREM', KEYS[2], ARGV[1])
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
	cmd, recs, version := s.runWithRecords(ctx, beginTurn, keys, []any{owner, ttl.Milliseconds()}, kinds)
	res, err := cmd.Slice()
	if err != nil {
		return store.Begun{}, fmt.Errorf("begin turn of %s: %w", conversation, err)
	}
	b, err := decodeBegun(conversation, res, kinds, recs)
	if err != nil {
		return store.Begun{}, fmt.Errorf("begin turn of %s: %w", conversation, err)
	}
	if b.Acquired {
		b.RecordsVersion = version
	}
	return b, nil
}

// runWithRecords runs script, pipelined with the listings of the records
// of kinds (one round trip), and returns the script's reply and the
// listings (nil without kinds).
func (s *Store) runWithRecords(ctx context.Context, script *redis.Script, keys []string, args []any, kinds []string) (*redis.Cmd, []*redis.MapStringStringCmd, int64) {
	if len(kinds) == 0 {
		return script.Run(ctx, s.c, keys, args...), nil, 0
	}
	cmd, recs, version := s.pipeWithRecords(ctx, script.EvalSha, keys, args, kinds)
	if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
		// Redis forgot its scripts (a restart, SCRIPT FLUSH), so the
		// script did not run: once more, with its text.
		cmd, recs, version = s.pipeWithRecords(ctx, script.Eval, keys, args, kinds)
	}
	return cmd, recs, version
}

// pipeWithRecords is runWithRecords' pipeline, the script sent by eval
// (the script's EvalSha, or its Eval).
func (s *Store) pipeWithRecords(ctx context.Context, eval func(context.Context, redis.Scripter, []string, ...any) *redis.Cmd, keys []string, args []any, kinds []string) (*redis.Cmd, []*redis.MapStringStringCmd, int64) {
	var cmd *redis.Cmd
	var version *redis.StringCmd
	recs := make([]*redis.MapStringStringCmd, len(kinds))
	// Each command's error is checked apart: records that cannot be read
	// are left out, the rest stands.
	_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		if !s.cluster {
			// Before the records: a change between the two reads makes
			// the version older than the records, never newer.
			version = p.Get(ctx, s.recordsVersionKey())
		}
		cmd = eval(ctx, p, keys, args...)
		for i, k := range kinds {
			recs[i] = p.HGetAll(ctx, s.recordsKey(k))
		}
		return nil
	})
	return cmd, recs, recordsVersion(version, recs)
}

// recordsVersion is store.Begun.RecordsVersion from the count of record
// changes read by version before recs: zero if either read failed.
func recordsVersion(version *redis.StringCmd, recs []*redis.MapStringStringCmd) int64 {
	if version == nil {
		return 0
	}
	for _, r := range recs {
		if r.Err() != nil {
			return 0
		}
	}
	n, err := version.Int64()
	switch {
	case errors.Is(err, redis.Nil):
		return 1
	case err != nil:
		return 0
	}
	return n + 1
}

// decodeBegun decodes the reply of beginTurnFn, with the records of kinds
// read by recs.
func decodeBegun(conversation string, res []any, kinds []string, recs []*redis.MapStringStringCmd) (store.Begun, error) {
	if n, _ := res[0].(int64); n != 1 {
		return store.Begun{}, nil
	}
	if len(res) != 3 {
		return store.Begun{}, fmt.Errorf("unexpected reply %v", res)
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
		var err error
		if b.Conversation, err = decodeConversation(conversation, m); err != nil {
			return store.Begun{}, err
		}
		b.Found = true
	}
	msgs, _ := res[2].([]any)
	for _, v := range msgs {
		raw, _ := v.(string)
		var m store.Inbound
		if err := fastjson.Unmarshal([]byte(raw), &m); err != nil {
			return store.Begun{}, fmt.Errorf("inbox: %w", err)
		}
		b.Inbox = append(b.Inbox, m)
	}
	return b, nil
}

// commitArgs returns the keys (conversation, inbox, lease, the sending's
// mark) and arguments of commitTurnFn for c.
func (s *Store) commitArgs(c store.Commit) ([]string, []any) {
	keys := []string{s.convKey(c.Key), s.inboxKey(c.Key), s.leaseKey(store.TurnLease(c.Key)), s.commitMark(c.Key)}
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
	return keys, args
}

// commitMark returns a new key for the mark of a commit's sending (see
// commitTurnFn), beside the conversation's lease in its hash slot: go-redis
// sends a script again when its reply is lost (an EOF, a read time-out),
// and the commit, applied by the first sending, must not be refused by the
// second as not held (the first released the lease) nor written twice. The
// nonce that names the sending is part of the key, which is passed in KEYS
// as a Cluster needs every key a script touches to be.
func (s *Store) commitMark(conversation string) string {
	return s.leaseKey(store.TurnLease(conversation)) + ":done:" + rand.Text()
}

// commitPause is CommitTurn of a commit that creates a run and finishes
// none, on a single node: one script (commitPause) writes all of it, in
// the order of the general path. commitKeys and commitArgs are those of
// commitTurnFn, the unanswered index included.
func (s *Store) commitPause(ctx context.Context, c store.Commit, commitKeys []string, commitArgs []any) error {
	nr, err := s.newRun(*c.Run, c.Calls, c.Notes)
	if err != nil {
		return fmt.Errorf("commit turn of %s: %w", c.Key, err)
	}
	entries := nr.index
	keys := make([]string, 0, len(nr.keys)+len(commitKeys)+1+len(entries))
	keys = append(append(append(keys, nr.keys...), commitKeys...), s.auditKey())
	args := make([]any, 0, 1+len(nr.args)+1+2*len(entries)+4+len(c.Audit)+1+len(commitArgs))
	args = append(append(args, len(nr.calls)), nr.args...)
	args = append(args, len(entries))
	for _, e := range entries {
		keys = append(keys, e.key)
		args = append(args, e.score.UnixMilli(), e.member)
	}
	audit, err := s.auditArgs(c.Audit)
	if err != nil {
		return fmt.Errorf("commit turn of %s: %w", c.Key, err)
	}
	args = append(args, nr.run.Conversation, nr.run.ID, s.convTTL.Milliseconds())
	args = append(append(append(args, audit...), string(c.Announce), s.pausesChannel()), commitArgs...)
	args = append(args, c.Holder)
	res, err := commitPause.Run(ctx, s.c, keys, args...).Slice()
	if err != nil {
		return fmt.Errorf("commit turn of %s: %w", c.Key, err)
	}
	switch code, _ := res[0].(string); code {
	case "notheld":
		return fmt.Errorf("commit turn of %s: %w", c.Key, store.ErrNotHolder)
	case "exists":
		return fmt.Errorf("commit turn of %s: create run %s: %w", c.Key, nr.run.ID, store.ErrRunExists)
	}
	if len(res) != 3 {
		return fmt.Errorf("commit turn of %s: unexpected reply %v", c.Key, res)
	}
	tail, _ := res[2].(string)
	s.trimStaleAudit(ctx, tail)
	return nil
}

// commitFinish is CommitTurn of a commit that finishes a run and creates
// none, on a single node: one script (commitFinish). It reports false, with
// nothing written, for a run that must be finished by the general path
// (one created before runs kept their conversation's key). commitKeys and
// commitArgs are those of commitTurnFn, the unanswered index included.
func (s *Store) commitFinish(ctx context.Context, c store.Commit, commitKeys []string, commitArgs []any) (bool, error) {
	keys := append(slices.Clone(commitKeys), s.auditKey(), s.runKey(c.Finish), s.claimKey(c.Finish), s.runsKey())
	args, err := s.auditArgs(c.Audit)
	if err != nil {
		return false, fmt.Errorf("commit turn of %s: %w", c.Key, err)
	}
	args = append(append(args, commitArgs...), s.retention.Milliseconds(), c.Finish, c.Holder)
	res, err := commitFinish.Run(ctx, s.c, keys, args...).Slice()
	if err != nil {
		return false, fmt.Errorf("commit turn of %s: %w", c.Key, err)
	}
	switch code, _ := res[0].(string); code {
	case "notheld":
		return false, fmt.Errorf("commit turn of %s: %w", c.Key, store.ErrNotHolder)
	case "legacy":
		return false, nil
	}
	if len(res) != 3 {
		return false, fmt.Errorf("commit turn of %s: unexpected reply %v", c.Key, res)
	}
	tail, _ := res[2].(string)
	s.trimStaleAudit(ctx, tail)
	return true, nil
}

// createRunHeld creates the run of c (see createRun). With c.Holder set,
// the run is kept only while the holder holds the conversation's lease,
// which the conversation's script checks after the run is written (and
// marks the conversation as paused on it only then): the lease is read
// beside the run's script, in one pipeline (their hash slots differ), and
// a run created while another owner held it is deleted again, as is one
// whose commit the conversation's script refuses (see CommitTurn).
func (s *Store) createRunHeld(ctx context.Context, c store.Commit) (newRun, error) {
	if c.Holder == "" {
		return s.createRun(ctx, *c.Run, c.Calls, c.Notes)
	}
	nr, err := s.newRun(*c.Run, c.Calls, c.Notes)
	if err != nil {
		return newRun{}, err
	}
	// rand.Text names this sending (see the script).
	args := append(slices.Clip(nr.args), rand.Text())
	p := s.c.Pipeline()
	lease := p.Get(ctx, s.leaseKey(store.TurnLease(c.Key)))
	created := createRun.EvalSha(ctx, p, nr.keys, args...)
	_, _ = p.Exec(ctx)
	held := holding(lease, c.Holder)
	if held == nil && redis.HasErrorPrefix(created.Err(), "NOSCRIPT") {
		created = createRun.Run(ctx, s.c, nr.keys, args...)
	}
	n, err := created.Int()
	if held != nil {
		if err == nil && n == 1 {
			// Every key the script wrote has the run's hash tag. Not
			// listed yet, the run may still have been decided, or its
			// resume claimed, since it was written (see dropRun).
			dropUndecidedRun.Run(context.WithoutCancel(ctx), s.c, append(slices.Clone(nr.keys), s.claimKey(nr.run.ID)))
		}
		return newRun{}, held
	}
	switch {
	case err != nil:
		return newRun{}, fmt.Errorf("create run %s: %w", nr.run.ID, err)
	case n == 0:
		return newRun{}, fmt.Errorf("create run %s: %w", nr.run.ID, store.ErrRunExists)
	}
	return nr, nil
}

// holding fails with store.ErrNotHolder unless lease, the read of a
// conversation's lease, names holder.
func holding(lease *redis.StringCmd, holder string) error {
	owner, err := lease.Result()
	switch {
	case errors.Is(err, redis.Nil):
		return store.ErrNotHolder
	case err != nil:
		return err
	case owner != holder:
		return store.ErrNotHolder
	}
	return nil
}

// trimStaleAudit trims the audit log when tail, its oldest entry read by a
// commit's script (empty: none), is past the audit retention (see
// trimAudit).
func (s *Store) trimStaleAudit(ctx context.Context, tail string) {
	if tail != "" {
		if cutoff := time.Now().Add(-s.auditTTL); staleAudit(tail, cutoff) {
			s.trimAudit(ctx, cutoff)
		}
	}
}

// unpushAudit removes the audit entries of a refused commit, which
// pushAuditMarked added beside its script.
func (s *Store) unpushAudit(ctx context.Context, entries []markedEntry) {
	if len(entries) == 0 {
		return
	}
	// Sent however the commit's context ended: its writer writes the
	// entries again.
	ctx = context.WithoutCancel(ctx)
	p := s.c.Pipeline()
	for _, e := range entries {
		b, err := auditJSON(e.AuditEntry)
		if err != nil {
			continue
		}
		p.LRem(ctx, s.auditKey(), 1, b)
	}
	_, _ = p.Exec(ctx)
}

// failure is the error of the first of cmds that failed other than skip,
// a read of the audit log's tail that found it empty aside.
func failure(cmds []redis.Cmder, tail *redis.StringCmd, skip redis.Cmder) error {
	for _, c := range cmds {
		err := c.Err()
		if err == nil || c == skip || tail != nil && c == redis.Cmder(tail) && errors.Is(err, redis.Nil) {
			continue
		}
		return err
	}
	return nil
}

// markedEntry is an audit entry of a commit and the mark of its sending
// (see pushAuditMarked).
type markedEntry struct {
	store.AuditEntry
	mark string
}

// entriesWhere returns the entries whose push (pushes[i], of entries[i],
// marked marks[i]) succeeded, or failed.
func entriesWhere(entries []store.AuditEntry, marks []string, pushes []*redis.Cmd, succeeded bool) []markedEntry {
	var out []markedEntry
	for i, e := range entries {
		if err := pushes[i].Err(); (err == nil || errors.Is(err, redis.Nil)) == succeeded {
			out = append(out, markedEntry{e, marks[i]})
		}
	}
	return out
}

// pushAuditAgain appends entries whose part of a commit's pipeline failed
// while the rest of it was made (see writeAgain); they are lost if that
// keeps failing. Each is added once for its mark: a part whose reply
// alone was lost added it.
func (s *Store) pushAuditAgain(ctx context.Context, entries []markedEntry) {
	if len(entries) == 0 {
		return
	}
	_ = writeAgain(ctx, func() error {
		p := s.c.Pipeline()
		for _, e := range entries {
			if _, err := s.pushAuditMarked(ctx, p, e.AuditEntry, e.mark); err != nil {
				return err
			}
		}
		cmds, _ := p.Exec(ctx)
		return failure(cmds, nil, nil)
	})
}

// pushAuditMarked adds to p the script that appends e to the capped audit
// list once for mark, a key of the audit log's hash slot that names the
// sending (see auditSentKey): go-redis sends a pipeline again when its
// reply is lost, and on a Cluster the part of it on the log's node alone,
// so an entry pushed beside a script that knows its sending (a commit's)
// would be added twice. The mark lasts auditMarkTTL, past the client's
// and writeAgain's sendings. The command's reply is the log's oldest
// entry (redis.Nil: none).
func (s *Store) pushAuditMarked(ctx context.Context, p redis.Pipeliner, e store.AuditEntry, mark string) (*redis.Cmd, error) {
	b, err := auditJSON(e)
	if err != nil {
		return nil, err
	}
	// Eval, not Run: a pipeline cannot fall back from EVALSHA.
	return pushAuditOnce.Eval(ctx, p, []string{s.auditKey(), mark}, b, s.auditMax, time.Now().Add(auditMarkTTL).UnixMilli()), nil
}

// auditMarkTTL is how long the mark of a commit's audit entry lasts.
const auditMarkTTL = time.Minute

// writeAgain runs write, a few times over about a second while it fails,
// and returns its last error.
func writeAgain(ctx context.Context, write func() error) error {
	var err error
	for _, wait := range []time.Duration{0, 100 * time.Millisecond, 300 * time.Millisecond, time.Second} {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(wait):
		}
		if err = write(); err == nil {
			return nil
		}
	}
	return err
}

// listRun writes the listings of a new run (see indexRun), a few times
// over about a second while they fail.
func (s *Store) listRun(ctx context.Context, nr newRun) error {
	return writeAgain(ctx, func() error {
		p := s.c.Pipeline()
		s.indexRun(ctx, p, nr, false)
		_, err := p.Exec(ctx)
		return err
	})
}

// dropUndecidedRun deletes a run, its calls and its resume claim, unless
// the run was acted on since it was created: a call of it decided (its
// status no longer pending, the run's pending count below its number of
// calls, or a decision named as the one that completed its step), or its
// resume claimed or finished (the claim key, a claim's nonce on the run,
// or the finished mark). The cards of a pause are posted before its
// commit, so an approver may decide its calls, and another process claim
// its resume, before the conversation's script refuses the commit; a run
// deleted then would be lost to that resume while it runs (its claim, its
// result and its finish would find nothing, though its tool may have
// run). A run left here is finished by its resume, which finds its
// conversation not paused on it and runs none of its calls. An approval
// counted on a call that needs several does not keep the run, as it
// completes no step and only the run's expiry would end the run. The
// checks and the deletion are one script, on the run's hash slot, so that
// no decision or claim comes in between.
// KEYS: run, call..., claim
// Returns 1 if the run was deleted (or was gone already), 0 if it is left.
var dropUndecidedRun = redis.NewScript(`
if redis.call('EXISTS', KEYS[#KEYS]) == 1 then return 0 end
local v = redis.call('HMGET', KEYS[1], 'pending', 'finished', 'completed', 'claim_nonce')
if v[2] == '1' or v[3] or v[4] or (v[1] and tonumber(v[1]) ~= #KEYS - 2) then return 0 end
for i = 2, #KEYS - 1 do
  local st = redis.call('HGET', KEYS[i], 'status')
  if st and st ~= 'pending' then return 0 end
end
for i = 1, #KEYS do redis.call('DEL', KEYS[i]) end
return 1
`)

// dropRun deletes a new run that no conversation is paused on (the
// conversation's script refused the commit or never ran, or the run's
// listings could not be written), and takes its calls out of the
// listings: no approver is asked, or reminded, to decide a call whose
// pause was never saved. A run that a decision or a resume acted on
// meanwhile is left, listings included (see dropUndecidedRun). The
// listings are taken out only once the run is deleted: a listing whose
// removal fails names calls that are gone, which its readers drop, and a
// run the script could not be sent to stays listed as it exists.
func (s *Store) dropRun(ctx context.Context, nr newRun) {
	// Sent however the commit's context ended.
	ctx = context.WithoutCancel(ctx)
	keys := append(slices.Clone(nr.keys), s.claimKey(nr.run.ID))
	// Sent as a pipeline, as the commit's other writes are, so that the
	// client's pipeline hooks see every write of a commit; by its text
	// only if Redis had not loaded it.
	p := s.c.Pipeline()
	drop := dropUndecidedRun.EvalSha(ctx, p, keys)
	_, _ = p.Exec(ctx)
	if redis.HasErrorPrefix(drop.Err(), "NOSCRIPT") {
		drop = dropUndecidedRun.Run(ctx, s.c, keys)
	}
	if n, err := drop.Int(); err != nil || n != 1 {
		return
	}
	if len(nr.index) == 0 {
		return
	}
	p = s.c.Pipeline()
	for _, e := range nr.index {
		p.ZRem(ctx, e.key, e.member)
	}
	_, _ = p.Exec(ctx)
}

// neverApplied reports whether the commit whose sending's mark is mark
// (see commitMark) is known not to have been applied: the mark, which its
// script writes with the rest, is not there. A NOSCRIPT reply alone does
// not prove it: go-redis sends a script again when its reply is lost, and
// the first sending may have been applied by a node that then failed over
// to a replica that does not hold the script.
func (s *Store) neverApplied(ctx context.Context, mark string) bool {
	return errors.Is(s.c.Get(context.WithoutCancel(ctx), mark).Err(), redis.Nil)
}

// markPaused marks the conversation of r, another than the commit's, as
// paused on r (as CreateRun does).
func (s *Store) markPaused(ctx context.Context, p redis.Pipeliner, r store.Run) {
	k := s.convKey(r.Conversation)
	p.HSet(ctx, k, "key", r.Conversation, "paused_run", r.ID)
	p.PExpire(ctx, k, s.convTTL)
}

// CommitTurn writes in this order, so that a failure or a crash part way
// leaves what a later turn can carry on from: the run (one script on its
// hash slot), then its index entries, then in one pipeline the audit
// entries and one script on the conversation's hash slot (the
// conversation, its inbox and its lease), then the finished run (one
// script), then in one pipeline the finished run's index entries dropped
// and the conversation unlisted if its inbox is empty, then a check of the
// inbox that lists it again if a message arrived meanwhile (as
// AnswerInbox). A run that cannot be created stops the commit before
// anything else is written; one whose index entries cannot be written is
// deleted again, and stops it too. On Redis Cluster the index entries are
// a step of their own, before the conversation's (see below): that is five
// round trips for a pause (a holder's lease is read beside the run's
// script) and four for the end of a resume. On a single node (or a
// Sentinel primary), which applies a pipeline in order, they go first in
// the conversation's pipeline; a pause is one script (commitPause), a
// commit that finishes a run (the end of a resume) is one script
// (commitFinish) for runs created by this version, and the commit's script
// unlists an answered conversation itself: each is one round trip. With
// c.Holder set, each script that writes the conversation first checks
// that no other owner holds its lease, and writes nothing if one does;
// on the general path the run, created in its own step first, is kept
// only if the lease read beside it names the holder and the conversation's
// script then makes the commit: a run whose commit is refused, or whose
// conversation's script is known never to have run, is deleted and taken
// out of the listings unless a decision or a resume acted on it meanwhile
// (see dropRun; a run created while the store cannot tell stays, unlisted,
// until it expires); the audit entries added beside the
// conversation's script are taken back if the commit is refused or fails,
// and written again if only their part failed; the conversation is marked
// as paused on the run only by its script, with the rest of it (a run of
// another conversation marks that one once the script made the commit).
// See storetest.Store for the contract.
func (s *Store) CommitTurn(ctx context.Context, c store.Commit) error {
	keys, args := s.commitArgs(c)
	// On a single node the script unlists the conversation itself, at
	// once, unless a run is finished first (see above).
	unlisted := !s.cluster && c.Finish == ""
	if unlisted {
		keys = append(keys, s.unansweredKey())
		if c.Run != nil && (c.Run.Conversation == "" || c.Run.Conversation == c.Key) {
			return s.commitPause(ctx, c, keys, args)
		}
	}
	if !s.cluster && c.Finish != "" && c.Run == nil {
		done, err := s.commitFinish(ctx, c, append(keys, s.unansweredKey()), args)
		if done || err != nil {
			return err
		}
	}
	var nr newRun
	if c.Run != nil {
		var err error
		if nr, err = s.createRunHeld(ctx, c); err != nil {
			return fmt.Errorf("commit turn of %s: %w", c.Key, err)
		}
		if s.cluster {
			// The listings are written in a step of their own, between
			// the run's and the conversation's: a Cluster splits a
			// pipeline by node and applies each part on its own, so
			// listings sent beside the conversation's script could fail
			// while the script pauses the conversation on calls that are
			// in no listing (never expired, reminded or listed as
			// pending). Written first, their failure fails the commit
			// with the conversation as it was. On a single node the
			// pipeline below applies them first.
			if err := s.listRun(ctx, nr); err != nil {
				s.dropRun(ctx, nr)
				return fmt.Errorf("commit turn of %s: index: %w", c.Key, err)
			}
		}
	}
	// The conversation's script marks it as paused on the run, when the
	// commit saves no record of it (which names its paused run itself),
	// and only if the lease is held: a run whose conversation was not
	// saved (a crash between the two steps, a lost lease) is not one the
	// conversation is paused on. A run of another conversation, beyond
	// the script's hash slot, marks that one once the script applied.
	markRun, markOther := "", false
	if c.Run != nil && c.Run.Conversation != "" {
		switch {
		case c.Run.Conversation != c.Key:
			markOther = true
		case c.Conversation == nil:
			markRun = c.Run.ID
		}
	}
	p := s.c.Pipeline()
	if c.Run != nil && !s.cluster {
		s.indexRun(ctx, p, nr, false)
	}
	pushed := make([]store.AuditEntry, len(c.Audit))
	pushes := make([]*redis.Cmd, len(c.Audit))
	marks := make([]string, len(c.Audit))
	nonce := rand.Text()
	for i, e := range c.Audit {
		if e.At.IsZero() {
			e.At = time.Now() // as auditJSON would, kept to take it back
		}
		pushed[i], marks[i] = e, s.auditSentKey("commit", nonce+"."+strconv.Itoa(i))
		var err error
		if pushes[i], err = s.pushAuditMarked(ctx, p, e, marks[i]); err != nil {
			return fmt.Errorf("commit turn of %s: audit %s: %w", c.Key, e.Action, err)
		}
	}
	var tail *redis.StringCmd
	if len(c.Audit) > 0 {
		tail = p.LIndex(ctx, s.auditKey(), -1)
	}
	args = append(args, string(c.Announce), s.pausesChannel(), markRun, c.Holder)
	commit := commitTurn.EvalSha(ctx, p, keys, args...)
	cmds, _ := p.Exec(ctx)
	err := failure(cmds, tail, nil)
	if redis.HasErrorPrefix(commit.Err(), "NOSCRIPT") {
		// The script was not loaded, so it did not run: run it alone
		// unless another command failed.
		if err = failure(cmds, tail, commit); err == nil {
			commit = commitTurn.Run(ctx, s.c, keys, args...)
			err = commit.Err()
		}
	}
	if left, lerr := commit.Int64(); lerr == nil && left == -2 {
		// The script refused the commit, whatever else failed. The audit
		// entries went beside it: they are taken back, as a refused
		// commit writes none (its writer keeps them, and writes them
		// itself). The run, created and listed before, is paused on by
		// no conversation: it is deleted, and unlisted, unless a decision
		// or a resume acted on it meanwhile (see dropRun).
		s.unpushAudit(ctx, entriesWhere(pushed, marks, pushes, true))
		if c.Run != nil {
			s.dropRun(ctx, nr)
		}
		return fmt.Errorf("commit turn of %s: %w", c.Key, store.ErrNotHolder)
	}
	if err != nil && commit.Err() == nil {
		// On Cluster a pipeline is split by node, and each part applied
		// on its own: the conversation's step may be made while another
		// node's part failed (a failover), leaving entries missing from
		// the audit log, or on a single node a listing's command may
		// fail while the script runs after it, leaving a conversation
		// paused on calls that are in no listing. The listings are
		// written again (their writes can be made twice), and so are the
		// entries whose part failed.
		if c.Run == nil || s.cluster || s.listRun(ctx, nr) == nil {
			err = nil
			s.pushAuditAgain(ctx, entriesWhere(pushed, marks, pushes, false))
		}
	}
	if err != nil {
		// The commit fails, so its writer keeps its entries for its next
		// write: those added are taken back, as after a refusal.
		s.unpushAudit(ctx, entriesWhere(pushed, marks, pushes, true))
		if c.Run != nil && redis.HasErrorPrefix(commit.Err(), "NOSCRIPT") && s.neverApplied(ctx, keys[3]) {
			// The script was not loaded and, another command having
			// failed, not sent again: no conversation is paused on the
			// run, which would otherwise stay listed, and be reminded,
			// until it expires. It is dropped as after a refusal.
			s.dropRun(ctx, nr)
		}
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
	if unindex != nil || unlist || markOther {
		p := s.c.Pipeline()
		if unindex != nil {
			unindex(p)
		}
		if markOther {
			s.markPaused(ctx, p, nr.run)
		}
		// The run the conversation is paused on after the commit, if
		// known here (relist reads it otherwise): a decided step keeps the
		// conversation listed.
		run := ""
		switch {
		case c.Run != nil:
			run = c.Run.ID
		case c.Conversation != nil:
			run = c.Conversation.PausedRun
		}
		switch {
		case unlist && !s.cluster:
			// One script on a single node: unlisted only if there is
			// nothing to list again.
			keys := []string{s.inboxKey(c.Key), s.unansweredKey()}
			if run != "" {
				keys = append(keys, s.runKey(run))
			}
			unlistIfAnswered.Eval(ctx, p, keys, c.Key)
		case unlist:
			p.ZRem(ctx, s.unansweredKey(), c.Key)
		}
		if _, err := p.Exec(ctx); err != nil {
			return fmt.Errorf("commit turn of %s: index: %w", c.Key, err)
		}
		if unlist && s.cluster {
			if err := s.relist(ctx, c.Key, run); err != nil {
				return fmt.Errorf("commit turn of %s: %w", c.Key, err)
			}
		}
	}
	if tail != nil && tail.Err() == nil {
		s.trimStaleAudit(ctx, tail.Val())
	}
	return nil
}
