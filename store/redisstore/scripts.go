package redisstore

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Every script touches keys of one hash tag only, so it runs on Redis
// Cluster too, except those that say they run on a single node only. Times are Unix microseconds (exact in a Lua number) unless a
// name says ms.

// createRunFn is the Lua function createRun(k, a, n) that writes a run
// and its n calls unless the run exists, and reports whether it did.
// KEYS from k: run, call...
// ARGV from a: run JSON, delete-at (ms), the key of the run's conversation
// (empty: none), then per call: call JSON, fingerprint, expires-at,
// remind-at (0: none), the index keys that list it, one per line (empty
// on Redis Cluster, where they are not kept), its note (empty: none).
// The conversation's key and each call's index keys are kept (fields conv
// and idx) for commitFinish, which on a single node unlists the calls and
// clears the conversation's paused run in the script that finishes it.
const createRunFn = `
local function createRun(k, a, n)
  if redis.call('EXISTS', KEYS[k]) == 1 then return false end
  redis.call('HSET', KEYS[k], 'run', ARGV[a], 'pending', n, 'conv', ARGV[a + 2])
  redis.call('PEXPIREAT', KEYS[k], ARGV[a + 1])
  for i = 1, n do
    local b = a + 2 + (i - 1) * 6
    local key = KEYS[k + i]
    redis.call('HSET', key, 'call', ARGV[b + 1], 'fp', ARGV[b + 2], 'exp', ARGV[b + 3], 'status', 'pending')
    if ARGV[b + 4] ~= '0' then redis.call('HSET', key, 'remind', ARGV[b + 4]) end
    if ARGV[b + 5] ~= '' then redis.call('HSET', key, 'idx', ARGV[b + 5]) end
    if ARGV[b + 6] ~= '' then redis.call('HSET', key, 'note', ARGV[b + 6]) end
    redis.call('PEXPIREAT', key, ARGV[a + 1])
  end
  return true
end
`

// createRun writes a run and its calls unless the run exists
// (createRunFn). The sending is named on the run (create_nonce), so that
// the same sending sent again by the client after its reply was lost is
// answered as the first was.
// KEYS: run, call...
// ARGV: as createRunFn, then the sending's nonce
// Returns 1 if created, 0 if the run exists.
var createRun = redis.NewScript(createRunFn + `
if redis.call('HGET', KEYS[1], 'create_nonce') == ARGV[#ARGV] then return 1 end
if not createRun(1, 1, #KEYS - 1) then return 0 end
redis.call('HSET', KEYS[1], 'create_nonce', ARGV[#ARGV])
return 1
`)

// decide moves a call from pending to a final status, and writes the
// effects of the decision (see decisionEffects). The decision that leaves
// no call of the run pending names its call in the run (field completed),
// for decidedResume.
// KEYS: call, run [, audit, unanswered, runs]
// ARGV: fingerprint, kind, at, decision JSON, new status, then the effects
// Returns {code, pending calls left, the call's callFields[, audit tail]}
// where code is ok, notfound, decided, mismatch, expired or early.
// decideHead starts decide, after decisionEffects: the call not found,
// or decided already.
const decideHead = `
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('EXISTS', KEYS[2]) == 0 then
  return {'notfound'}
end
if redis.call('HGET', KEYS[1], 'status') ~= 'pending' then return reply('decided', -1) end
`

// decideBody is the rest of decide.
const decideBody = `
local kind = ARGV[2]
if kind ~= 'expire' and kind ~= 'cancel' and redis.call('HGET', KEYS[1], 'fp') ~= ARGV[1] then
  return reply('mismatch', -1)
end
local exp = tonumber(redis.call('HGET', KEYS[1], 'exp'))
local at = tonumber(ARGV[3])
if kind == 'expire' then
  if at < exp then return reply('early', -1) end
elseif at >= exp then
  return reply('expired', -1)
end
redis.call('HSET', KEYS[1], 'status', ARGV[5], 'decision', ARGV[4])
redis.call('HDEL', KEYS[1], 'remind', 'approve_nonce')
local left = redis.call('HINCRBY', KEYS[2], 'pending', -1)
if left == 0 then redis.call('HSET', KEYS[2], 'completed', KEYS[1]) end
effects(ARGV[#ARGV - 3], left)
return reply('ok', left)
`

var decide = redis.NewScript(decisionEffects + decideHead + decideBody)

// decideIf is decide on a single node, if the records are still at the
// version given (see store.Condition.IfRecords); a decided call is
// answered as by decide, so that the same decision sent again after its
// reply was lost is known as recorded even if the records changed since.
// KEYS: call, run, audit, unanswered, runs, records version
// ARGV: as decide, with after the first five the records version
// expected (the count of record changes), 1 if the call has a pending
// edit (else 0) and the approvers of its approvals (a JSON array), as
// judged
// Returns {'stale'} when the records changed, {'stale', -1, the call's
// callFields} when its approvals or edit did, else what decide returns.
var decideIf = redis.NewScript(decisionEffects + decideHead + `
if tonumber(redis.call('GET', KEYS[6]) or '0') ~= tonumber(ARGV[6]) then return {'stale'} end
` + heldAsJudged(7, 8) + decideBody)

// decideHeld is decide if the call holds the approvals and edit it was
// judged with (see store.Condition.IfHeld), whatever the records' version:
// on a Cluster, which keeps none, or in no other slot than the call's.
// KEYS: as decide
// ARGV: as decideIf (the records version is not read)
var decideHeld = redis.NewScript(decisionEffects + decideHead + heldAsJudged(7, 8) + decideBody)

// heldAsJudged is the part of a script that answers {'stale', -1, the
// call's callFields} unless the call (KEYS[1]) holds the approvals of the
// approvers in ARGV[approvers] (a JSON array), in that order, and a
// pending edit exactly when ARGV[edited] is 1.
func heldAsJudged(edited, approvers int) string {
	return fmt.Sprintf(`
local judged = cjson.decode(ARGV[%[2]d])
local cur = redis.call('HGET', KEYS[1], 'approvals')
local held = {}
if cur then held = cjson.decode(cur) end
local same = #held == #judged and (redis.call('HEXISTS', KEYS[1], 'edit') == 1) == (ARGV[%[1]d] == '1')
for i = 1, #held do
  if not same then break end
  same = held[i].approver == judged[i]
end
if not same then return reply('stale', -1) end
`, edited, approvers)
}

// approve counts one approval of a call that needs several, and decides
// it once enough are counted; it writes the effects of either (see
// decisionEffects), the audit entry completed as store.ApprovalAudit
// does. The approvals field is a JSON array of approvals; edit and fp hold
// an edit that restarted the count.
// The sending that counted or decided is named on the call (approve_nonce),
// and the one that completes the run's step in the run (completed), so
// that the same sending sent again by the client after its reply was lost
// is answered as the first was. Every sending counted is named on the call
// too (approve_nonces): one sent again after a later approval dropped the
// approval it counted, or replaced it, is answered as a duplicate and
// writes nothing: an approval dropped as stale (no longer an approver's)
// is not counted again, and cannot decide the call. One sent again after
// another approval decided the call with the approval it counted is
// answered as counted, with the call decided (on a Cluster the counted
// effects, written after the reply, are written then); after any other
// decision (a cancel, an expiry, a denial) it is answered as decided.
// KEYS: call, run [, audit, unanswered, runs]
// ARGV: fingerprint, at, approver, approval JSON, need, decision JSON,
// new status, edit JSON (empty for none), edit fingerprint, the sending's
// nonce, the approvers whose approvals are dropped (a JSON array, empty
// for none), the edit's earlier expiry (µs, empty for none), the call's
// reminder times under that expiry (µs, space-separated; see
// store.Reminders), then the effects, the audit entry without its closing
// brace
// Returns {code, pending calls left, the call's callFields[, audit tail]}
// where code is ok, counted, duplicate, notfound, decided, mismatch or
// expired.
var approve = redis.NewScript(decisionEffects + `
local function counted() end
` + approveHead + approveBody)

// approveHead starts the approve script: the refusals.
const approveHead = `
if redis.call('EXISTS', KEYS[1]) == 0 or redis.call('EXISTS', KEYS[2]) == 0 then
  return {'notfound'}
end
if redis.call('HGET', KEYS[1], 'approve_nonce') == ARGV[10] then
  if redis.call('HGET', KEYS[1], 'status') == 'pending' then return reply('counted', -1) end
  local left = 1
  if redis.call('HGET', KEYS[2], 'completed') == KEYS[1] then left = 0 end
  return reply('ok', left)
end
local sendings = redis.call('HGET', KEYS[1], 'approve_nonces')
local sent = sendings and string.find(' ' .. sendings .. ' ', ' ' .. ARGV[10] .. ' ', 1, true)
local status = redis.call('HGET', KEYS[1], 'status')
if status ~= 'pending' then
  -- Counted by this sending, then decided by another approval that kept
  -- it (named in approve_nonce, which a decide script clears; this
  -- approver's approval held): counted.
  if sent and redis.call('HEXISTS', KEYS[1], 'approve_nonce') == 1 then
    for _, a in ipairs(cjson.decode(redis.call('HGET', KEYS[1], 'approvals') or '[]')) do
      if a.approver == ARGV[3] then return reply('counted', -1) end
    end
  end
  return reply('decided', -1)
end
if redis.call('HGET', KEYS[1], 'fp') ~= ARGV[1] then return reply('mismatch', -1) end
if tonumber(ARGV[2]) >= tonumber(redis.call('HGET', KEYS[1], 'exp')) then return reply('expired', -1) end
if sent then return reply('duplicate', -1) end
`

// approveBody is the rest of the approve script: the approval counted
// (then the script's function counted is called), and the decision it
// completes.
const approveBody = `
local list = '[' .. ARGV[4] .. ']'
local n = 1
if ARGV[8] ~= '' then
  redis.call('HSET', KEYS[1], 'edit', ARGV[8], 'fp', ARGV[9])
  if ARGV[12] ~= '' and tonumber(ARGV[12]) < tonumber(redis.call('HGET', KEYS[1], 'exp')) then
    redis.call('HSET', KEYS[1], 'exp', ARGV[12])
    -- The next reminder is the one after those claimed under the new
    -- expiry, or none (store.NextRemindAt); a call with none keeps none.
    if redis.call('HEXISTS', KEYS[1], 'remind') == 1 then
      local times = {}
      for t in string.gmatch(ARGV[13], '%d+') do times[#times + 1] = t end
      local next = times[tonumber(redis.call('HGET', KEYS[1], 'reminded') or '0') + 1]
      if next then
        redis.call('HSET', KEYS[1], 'remind', next)
      else
        redis.call('HDEL', KEYS[1], 'remind')
      end
    end
  end
else
  local cur = redis.call('HGET', KEYS[1], 'approvals')
  if cur then
    local drop = {}
    if ARGV[11] ~= '' then
      for _, id in ipairs(cjson.decode(ARGV[11])) do drop[id] = true end
    end
    local kept = {}
    for _, a in ipairs(cjson.decode(cur)) do
      if a.approver == ARGV[3] and not drop[a.approver] then return reply('duplicate', -1) end
      if not drop[a.approver] then
        kept[#kept + 1] = cjson.encode(a)
        n = n + 1
      end
    end
    if next(drop) == nil then
      list = string.sub(cur, 1, -2) .. ',' .. ARGV[4] .. ']'
    elseif #kept > 0 then
      list = '[' .. table.concat(kept, ',') .. ',' .. ARGV[4] .. ']'
    end
  end
end
if sendings then sendings = sendings .. ' ' .. ARGV[10] else sendings = ARGV[10] end
redis.call('HSET', KEYS[1], 'approvals', list, 'approve_nonce', ARGV[10], 'approve_nonces', sendings)
local entry = ARGV[#ARGV - 3]
if entry ~= '' then
  local outcome = 'recorded'
  if n < tonumber(ARGV[5]) then outcome = 'counted' end
  entry = entry .. ',"outcome":"' .. outcome .. '","detail":"' .. n .. ' of ' .. ARGV[5] .. ' approvals"}'
end
if n < tonumber(ARGV[5]) then
  effects(entry, -1)
  counted()
  return reply('counted', -1)
end
redis.call('HSET', KEYS[1], 'status', ARGV[7], 'decision', ARGV[6])
redis.call('HDEL', KEYS[1], 'remind')
local left = redis.call('HINCRBY', KEYS[2], 'pending', -1)
if left == 0 then redis.call('HSET', KEYS[2], 'completed', KEYS[1]) end
effects(entry, left)
return reply('ok', left)
`

// approveIf is approve on a single node, if the records are still at the
// version given and the call holds the approvals it was judged with (see
// store.Condition.IfApprovers); a sending sent again, and a refusal,
// are answered as by approve.
// KEYS: call, run, audit, unanswered, runs, records version
// ARGV: as approve, with after the first thirteen the records version
// expected (the count of record changes), 1 if the call has a pending
// edit (else 0), the approvers of its approvals (a JSON array), and the
// announcement to publish when the approval is counted (empty: none) with
// its channel
// Returns {'stale'} when the records changed, {'stale', -1, the call's
// callFields} when its approvals did, else what approve returns.
var approveIf = redis.NewScript(decisionEffects + `
local function counted()
  if ARGV[17] ~= '' then redis.call('PUBLISH', ARGV[18], ARGV[17]) end
end
` + approveHead + `
if tonumber(redis.call('GET', KEYS[6]) or '0') ~= tonumber(ARGV[14]) then return {'stale'} end
` + heldAsJudged(15, 16) + approveBody)

// approveHeld is approve if the call holds the approvals and edit it was
// judged with, whatever the records' version, as decideHeld is decide.
// KEYS: as approve
// ARGV: as approveIf (the records version is not read)
var approveHeld = redis.NewScript(decisionEffects + `
local function counted()
  if ARGV[17] ~= '' then redis.call('PUBLISH', ARGV[18], ARGV[17]) end
end
` + approveHead + heldAsJudged(15, 16) + approveBody)

// decisionEffects starts the decide and approve scripts: reply, and
// effects, which writes what a decision brings with it when the script
// has the audit, unanswered and runs keys (one Redis node; on a Cluster
// they are in other hash slots, and the caller writes the first two after
// the script, and moves the run in the third beside it): the
// audit entry, and once no call of the run is pending, the conversation
// listed as unanswered and the run, unless finished, listed for Stalled
// (the list kept at least as long as the run).
// ARGV ends with the effects: audit entry JSON (empty: none), audit max,
// conversation to list as unanswered once nothing is pending (empty:
// none), at (ms).
const decisionEffects = `
local function reply(code, left)
  local f = redis.call('HMGET', KEYS[1], 'call', 'status', 'decision', 'executing', 'result', 'approvals', 'edit', 'fp', 'remind', 'reminded', 'exp')
  local r = {code, left, f[1], f[2], f[3], f[4], f[5], f[6], f[7], f[8], f[9], f[10], f[11]}
  if #KEYS > 2 then r[14] = redis.call('LINDEX', KEYS[3], -1) end
  return r
end
local function effects(entry, left)
  if #KEYS < 5 then return end
  if entry ~= '' then
    redis.call('LPUSH', KEYS[3], entry)
    redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[#ARGV - 2]) - 1)
  end
  if left ~= 0 then return end
  if ARGV[#ARGV - 1] ~= '' then
    redis.call('ZADD', KEYS[4], 'NX', ARGV[#ARGV], ARGV[#ARGV - 1])
  end
  if redis.call('HGET', KEYS[2], 'finished') == '1' then return end
  redis.call('ZADD', KEYS[5], 'LT', ARGV[#ARGV], string.match(KEYS[2], '{([^{}]*)}$'))
  local ttl = redis.call('PTTL', KEYS[2])
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[5], ttl, 'NX')
    redis.call('PEXPIRE', KEYS[5], ttl, 'GT')
  end
end
`

// pushAuditOnce appends a decision's audit entry to the capped log on a
// Cluster, where the entry follows the decision's script (see addEffects),
// unless the mark of the sending that made the decision, given, is set: a
// sending made again after its answer was lost makes the follow-up again,
// whether or not the first was made. The mark is set in the log's hash
// slot, and kept until the entry is past the audit retention: a copy added
// after that would never be listed, and is trimmed.
// KEYS: audit[, the sending's mark]
// ARGV: entry, max entries kept, the mark's expiry (Unix ms)
// Returns the log's oldest entry.
var pushAuditOnce = redis.NewScript(`
if #KEYS == 1 or redis.call('SET', KEYS[2], '1', 'NX', 'PXAT', ARGV[3]) then
  redis.call('LPUSH', KEYS[1], ARGV[1])
  redis.call('LTRIM', KEYS[1], 0, tonumber(ARGV[2]) - 1)
end
return redis.call('LINDEX', KEYS[1], -1)
`)

// claimReminder claims reminder n of a pending call and moves its
// remind-at time; the global reminder index is updated by the caller.
// The sending that claimed a reminder is named with it, so that the same
// sending sent again by the client after its reply was lost is answered 1
// again.
// KEYS: call, run
// ARGV: n, next remind-at (0: none), the sending's nonce
// Returns 1 if claimed, 0 if the call is not pending (of an unfinished run)
// or has no reminder to send, 2 if reminder n or a later one was claimed,
// -1 if the call is unknown.
var claimReminder = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'status', 'remind', 'reminded', 'remind_nonce')
if not v[1] then return -1 end
if v[4] == ARGV[3] and v[3] == ARGV[1] then return 1 end
if v[1] ~= 'pending' or not v[2] or redis.call('HGET', KEYS[2], 'finished') == '1' then return 0 end
if tonumber(v[3] or '0') >= tonumber(ARGV[1]) then return 2 end
redis.call('HSET', KEYS[1], 'reminded', ARGV[1], 'remind_nonce', ARGV[3])
if ARGV[2] == '0' then
  redis.call('HDEL', KEYS[1], 'remind')
else
  redis.call('HSET', KEYS[1], 'remind', ARGV[2])
end
return 1
`)

// claimResume takes the resume claim of a run with no pending call.
// KEYS: run, claim
// ARGV: owner, lease (ms)
// Returns 1 if claimed, 0 if not, -1 if the run is unknown.
var claimResume = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'pending', 'finished')
if not v[1] then return -1 end
if v[2] == '1' or tonumber(v[1]) > 0 then return 0 end
if redis.call('SET', KEYS[2], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('HSET', KEYS[1], 'claim_nonce', '', 'claim_start', '')
  return 1
end
return 0
`)

// beginExecution sets the executing flag of a decided call once, naming
// the sending that set it: the same sending sent again by the client after
// its reply was lost is answered 1 again, where any other gets 0.
// KEYS: call
// ARGV: the sending's nonce
// Returns 1 the first time, 0 after or if the call is not decided, -1 if unknown.
var beginExecution = redis.NewScript(`
local st = redis.call('HGET', KEYS[1], 'status')
if not st then return -1 end
if st ~= 'decided' then return 0 end
if redis.call('HSETNX', KEYS[1], 'executing', '1') == 1 then
  redis.call('HSET', KEYS[1], 'exec_nonce', ARGV[1])
  return 1
end
if redis.call('HGET', KEYS[1], 'exec_nonce') == ARGV[1] then return 1 end
return 0
`)

// putCallNote sets the note of an existing call.
// KEYS: call
// ARGV: note
// Returns 1, or -1 if the call is unknown.
var putCallNote = redis.NewScript(`
if redis.call('HEXISTS', KEYS[1], 'call') == 0 then return -1 end
redis.call('HSET', KEYS[1], 'note', ARGV[1])
return 1
`)

// abandonExecution clears the executing flag of a call with no result
// that the named attempt set: a sending made again after another process
// marked the call leaves that mark.
// KEYS: call
// ARGV: the attempt
// Returns 1 if the call exists, -1 if unknown.
var abandonExecution = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local v = redis.call('HMGET', KEYS[1], 'result', 'exec_nonce')
if not v[1] and ARGV[1] ~= '' and v[2] == ARGV[1] then redis.call('HDEL', KEYS[1], 'executing', 'exec_nonce') end
return 1
`)

// skipExecution sets the executing flag of a decided call that will not
// run, with its result, at once; the same result found with the flag is
// a sending made again.
// KEYS: call
// ARGV: result
// Returns 1 if set, 2 if set before with the same result, 0 if the call
// is not decided or was marked otherwise, -1 if unknown.
var skipExecution = redis.NewScript(`
local v = redis.call('HMGET', KEYS[1], 'status', 'executing', 'result')
if not v[1] then return -1 end
if v[2] == '1' then
  if v[3] == ARGV[1] then return 2 end
  return 0
end
if v[1] ~= 'decided' then return 0 end
redis.call('HSET', KEYS[1], 'executing', '1', 'result', ARGV[1])
return 1
`)

// saveResult stores the result of an executing call, naming the sending
// that saved it and the entry saved with it (by its SHA-1), and, given the
// audit log's key (not on a Cluster), appends the entry to the log. A call
// that has a result already is left as it is.
// KEYS: call[, audit]
// ARGV: result, entry ("": none), max entries kept, sending
// Returns {1} if saved ({1, oldest entry} with an entry), {2} if this
// sending saved it before (the client sent it again), {5} if another
// sending saved the same result with the same entry (the caller's own
// earlier save, whose reply was lost), {4} if another saved the same
// result, {3} if another result is saved, {0} if the call is not
// executing, {-1} if unknown.
var saveResult = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return {-1} end
local v = redis.call('HMGET', KEYS[1], 'executing', 'result', 'result_nonce', 'result_entry')
if v[1] ~= '1' then return {0} end
if v[2] then
  if v[3] == ARGV[4] then return {2} end
  if v[2] == ARGV[1] and ARGV[2] ~= '' and v[4] == redis.sha1hex(ARGV[2]) then return {5} end
  if v[2] == ARGV[1] then return {4} end
  return {3}
end
redis.call('HSET', KEYS[1], 'result', ARGV[1], 'result_nonce', ARGV[4])
if ARGV[2] ~= '' then redis.call('HSET', KEYS[1], 'result_entry', redis.sha1hex(ARGV[2])) end
if #KEYS > 1 and ARGV[2] ~= '' then
  redis.call('LPUSH', KEYS[2], ARGV[2])
  redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
  return {1, redis.call('LINDEX', KEYS[2], -1)}
end
return {1}
`)

// finishRun marks a run finished and shortens the life of its keys to the
// retention time. Its calls are found by their ids (store.CallID: run id,
// ".", 0, 1, ...).
// KEYS: run, claim
// ARGV: retention (ms), run id
// Returns {1, run JSON, each call's JSON...} if finished now, the same with
// 2 if it was finished already (the clean-up after it is made again: a
// sending whose reply was lost, sent again, finds the run finished), {0}
// if unknown.
var finishRun = redis.NewScript(`
local run = redis.call('HMGET', KEYS[1], 'run', 'finished')
if not run[1] then return {0} end
local code = 2
if run[2] ~= '1' then
  code = 1
  redis.call('HSET', KEYS[1], 'finished', '1')
  redis.call('DEL', KEYS[2])
  redis.call('PEXPIRE', KEYS[1], ARGV[1], 'LT')
end
local out = {code, run[1]}
local i = 0
while true do
  local k = KEYS[1] .. ':call:' .. ARGV[2] .. '.' .. i
  local c = redis.call('HGET', k, 'call')
  if not c then break end
  if code == 1 then redis.call('PEXPIRE', k, ARGV[1], 'LT') end
  out[#out + 1] = c
  i = i + 1
end
return out
`)

// clearPaused removes a conversation's paused run if it is the given one.
// KEYS: conversation
// ARGV: run id
var clearPaused = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'paused_run') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'paused_run')
end
return 0
`)

// acquireLease takes a free lease or renews one the owner holds.
// KEYS: lease
// ARGV: owner, ttl (ms)
var acquireLease = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if v == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// renewLease extends a lease the owner holds; it never takes a free one.
// KEYS: lease
// ARGV: owner, ttl (ms)
var renewLease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// releaseLease deletes a lease if the owner holds it, and announces the
// release to waiters (see WatchLease).
// KEYS: lease
// ARGV: owner, release channel
var releaseLease = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], '1')
  return 1
end
return 0
`)

// recordSentFn holds the Lua functions of putRecord: sentBy(k, id, nonce),
// the version the sending nonce wrote to record id of the records k, or
// nil if it wrote none, with the record's field n:ID; and named(n, nonce,
// v), that field with the sending nonce that wrote version v put first.
// The field holds the sendings that last wrote the record, newest first
// ("nonce:version", space-separated, the last eight): the same sending
// sent again after its reply was lost, even once other writes landed in
// between, is answered as the first was, and not written again. A delete
// takes the field with the record (see deleteRecord).
const recordSentFn = `
local function sentBy(k, id, nonce)
  local n = redis.call('HGET', k, 'n:' .. id) or ''
  for s, v in string.gmatch(n, '(%S+):(%d+)') do
    if s == nonce then return tonumber(v), n end
  end
  return nil, n
end
local function named(n, nonce, v)
  local out = {nonce .. ':' .. v}
  for s in string.gmatch(n, '%S+:%d+') do
    if #out == 8 then break end
    out[#out + 1] = s
  end
  return table.concat(out, ' ')
end
`

// putRecord writes a record with a compare-and-set on its version and,
// given the key of the count of record changes (a single node), counts the
// change. The sending that wrote the record is named beside it (see
// recordSentFn), so that the same sending sent again after a lost reply is
// answered as the first was, not as a conflict or a second change.
// KEYS: records of a kind [, count of record changes]
// ARGV: id, expected version (-1: any), record JSON, the sending's nonce
// Returns the new version, or -1 on a version conflict.
var putRecord = redis.NewScript(recordSentFn + `
local sent, n = sentBy(KEYS[1], ARGV[1], ARGV[4])
if sent then return sent end
local cur = tonumber(redis.call('HGET', KEYS[1], 'v:' .. ARGV[1]) or '0')
local expect = tonumber(ARGV[2])
if expect >= 0 and expect ~= cur then return -1 end
redis.call('HSET', KEYS[1], 'v:' .. ARGV[1], cur + 1, 'd:' .. ARGV[1], ARGV[3], 'n:' .. ARGV[1], named(n, ARGV[4], cur + 1))
if #KEYS >= 2 then redis.call('INCR', KEYS[2]) end
return cur + 1
`)

// deleteRecord deletes a record, its fields all (no trace of it is left
// in the hash, which every turn reads whole), and, given the key of the
// count of record changes (a single node), counts the change, if there was
// a record. The sendings of the last 32 deletions of the kind are named in
// one field, n: (no record's, ids being never empty), so that the same
// sending sent again after its reply was lost is answered as the first
// was, not as a record not found.
// KEYS: records of a kind [, count of record changes]
// ARGV: id, the sending's nonce
// Returns 1 if deleted, also by this sending before, 0 if there is no
// record.
var deleteRecord = redis.NewScript(`
local k, id = KEYS[1], ARGV[1]
local sending = id .. ':' .. ARGV[2]
local gone = redis.call('HGET', k, 'n:') or ''
if string.find(' ' .. gone .. ' ', ' ' .. sending .. ' ', 1, true) then return 1 end
if redis.call('HEXISTS', k, 'd:' .. id) == 0 then
  redis.call('HDEL', k, 'v:' .. id, 'n:' .. id)
  return 0
end
redis.call('HDEL', k, 'd:' .. id, 'v:' .. id, 'n:' .. id)
local out = {sending}
for s in string.gmatch(gone, '%S+') do
  if #out == 32 then break end
  out[#out + 1] = s
end
redis.call('HSET', k, 'n:', table.concat(out, ' '))
if #KEYS >= 2 then redis.call('INCR', KEYS[2]) end
return 1
`)

// renewClaim extends the resume claim of its owner.
// KEYS: run, claim
// ARGV: owner, lease (ms)
// Returns 1 if renewed, 0 if the owner holds no live claim or the run is
// finished, -1 if the run is unknown.
var renewClaim = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('HGET', KEYS[1], 'finished') == '1' then return 0 end
if redis.call('GET', KEYS[2]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
  return 1
end
return 0
`)

// releaseClaim deletes the resume claim if its owner holds it.
// KEYS: claim
// ARGV: owner
var releaseClaim = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
`)

// acceptFn is the Lua function accept(u) that de-duplicates a message and
// appends it to the inbox.
// KEYS: conversation, inbox, inbox seq, seen event id, seen message id,
// and at u (nil: none) the index of unanswered conversations
// ARGV: require known (1/0), check event id (1/0), check message id (1/0),
// dedupe ttl (ms), message JSON starting {"seq":0, , keep (ms), now (µs),
// listing time (ms), conversation (the index's member), and as the
// script's last ARGV the sending's nonce
// It returns {code, seq, inbox length, listed} where code is accepted,
// duplicate or unknown. Seq is max(previous + 1, now): it keeps growing
// even after the counter expired with an idle conversation. Given the index
// of unanswered conversations (a single node, where a script reaches every
// key), a message accepted, or a duplicate while the inbox holds messages,
// lists the conversation there too (ZADD NX) and listed is 1; on Redis
// Cluster the index is in another hash slot and the caller lists it.
const acceptFn = `
local function accept(u)
  local function reply(code, seq)
    local left = redis.call('LLEN', KEYS[2])
    if u and left > 0 then
      redis.call('ZADD', KEYS[u], 'NX', ARGV[8], ARGV[9])
      return {code, seq, left, 1}
    end
    return {code, seq, left, 0}
  end
  -- A seen key holds the sending that recorded the message and its seq:
  -- the same sending sent again after its reply was lost is answered as
  -- the first was.
  local nonce = ARGV[#ARGV]
  local function seen(k)
    if redis.call('SET', KEYS[k], nonce, 'NX', 'PX', ARGV[4]) then return nil end
    local v = redis.call('GET', KEYS[k]) or ''
    local n, seq = string.match(v, '^(%S+) (%d+)$')
    if n and n == nonce then return seq end
    return false
  end
  -- A message in a thread the bot is not in records nothing, not even its
  -- ids: Slack's next delivery of it, if it was not acked, is not taken
  -- for a duplicate.
  if ARGV[1] == '1' and redis.call('EXISTS', KEYS[1]) == 0 and redis.call('EXISTS', KEYS[3]) == 0 then
    return {'unknown', 0, 0, 0}
  end
  local again = nil
  if ARGV[2] == '1' then
    again = seen(4)
    if again == false then return reply('duplicate', 0) end
    if again then return reply('accepted', again) end
  end
  if ARGV[3] == '1' then
    again = seen(5)
    if again == false then return reply('duplicate', 0) end
    if again then return reply('accepted', again) end
  end
  local n = math.max(tonumber(redis.call('GET', KEYS[3]) or '0') + 1, tonumber(ARGV[7]))
  local s = string.format('%d', n)
  redis.call('SET', KEYS[3], s, 'PX', ARGV[6])
  redis.call('RPUSH', KEYS[2], '{"seq":' .. s .. string.sub(ARGV[5], 9))
  redis.call('PEXPIRE', KEYS[2], ARGV[6])
  if ARGV[2] == '1' then redis.call('SET', KEYS[4], nonce .. ' ' .. s, 'PX', ARGV[4]) end
  if ARGV[3] == '1' then redis.call('SET', KEYS[5], nonce .. ' ' .. s, 'PX', ARGV[4]) end
  return reply('accepted', s)
end
`

// acceptMessage is acceptFn as a script.
// KEYS: as acceptFn, the index of unanswered conversations sixth if given
// ARGV: as acceptFn
// Returns what accept returns.
var acceptMessage = redis.NewScript(acceptFn + `
if #KEYS >= 6 then return accept(6) end
return accept(nil)
`)

// acceptBegin is acceptFn and, if the message was accepted, beginTurnFn,
// in one script on the conversation's hash slot (and the index of
// unanswered conversations on a single node).
// KEYS: as acceptFn, then the lease, then the index of unanswered
// conversations if given
// ARGV: as acceptFn, then the owner and the lease's ttl (ms), then the
// sending's nonce
// Returns {accept's reply} or {accept's reply, begin's reply}.
var acceptBegin = redis.NewScript(acceptFn + beginTurnFn + `
local u = nil
if #KEYS >= 7 then u = 7 end
local r = accept(u)
if r[1] ~= 'accepted' then return {r} end
return {r, begin(6, 1, 2, ARGV[10], ARGV[11])}
`)

// answerInbox drops the messages up to a seq from the head of the inbox.
// KEYS: inbox
// ARGV: up to (seq)
// Returns how many messages are left.
var answerInbox = redis.NewScript(`
local upTo = tonumber(ARGV[1])
while true do
  local v = redis.call('LINDEX', KEYS[1], 0)
  if not v then break end
  local seq = tonumber(string.match(v, '^{"seq":(%d+)'))
  if seq and seq > upTo then break end
  redis.call('LPOP', KEYS[1])
end
return redis.call('LLEN', KEYS[1])
`)

// beginResumeFn is the Lua function resume(run, claim, conv, lease,
// owner, ttl, id, start, nonce) that takes the lease of a run's
// conversation and the run's resume claim, and loads the run, its calls
// and the conversation (see Store.BeginResume); conv and lease may be nil.
// The call keys are the run key, ":call:" and the call ids id.0, id.1,
// ..., in the run's hash slot. When it claims, it marks the call to start
// as executing, as beginExecution does (see store.FirstToStart): the first
// decided with a kind in the list start. With a nonce (not empty) it
// keeps the nonce and the call it marked on the run (claim_nonce,
// claim_start, and the claim's before it: claim_prior_nonce,
// claim_prior_start), and a later call with the same owner and nonce that
// finds that claim still held answers as the first did, the claim before
// it included (store.ResumeBegin.Nonce).
// It returns {code, run JSON, finished, calls (each its callFields), the
// conversation's HGETALL, the id of the call marked or an empty string,
// the nonce and the marked call of the claim taken before} where code is
// claimed, idle, busy or notfound.
const beginResumeFn = `
local function resume(run, claim, conv, lease, owner, ttl, id, start, nonce, againOnly)
  local v = redis.call('HMGET', run, 'run', 'pending', 'finished', 'claim_nonce', 'claim_start', 'claim_prior_nonce', 'claim_prior_start')
  if not v[1] then return {'notfound'} end
  local fin = v[3] or ''
  if fin == '1' or tonumber(v[2]) > 0 then
    return {'idle', v[1], fin}
  end
  local again = false
  if redis.call('EXISTS', claim) == 1 then
    if nonce == '' or v[4] ~= nonce or redis.call('GET', claim) ~= owner then
      return {'idle', v[1], fin}
    end
    again = true
  end
  if againOnly and not again then return {'idle', v[1], fin} end
  if lease then
    local l = redis.call('GET', lease)
    if l and l ~= owner then return {'busy', v[1], fin} end
    redis.call('SET', lease, owner, 'PX', ttl)
  end
  redis.call('SET', claim, owner, 'PX', ttl)
  local calls = {}
  for i = 0, 1000000 do
    local f = redis.call('HMGET', run .. ':call:' .. id .. '.' .. i, 'call', 'status', 'decision', 'executing', 'result', 'approvals', 'edit', 'fp', 'remind', 'reminded', 'exp')
    if not f[1] then break end
    calls[#calls + 1] = f
  end
  local c = {}
  if conv then c = redis.call('HGETALL', conv) end
  local started = ''
  if again then
    -- The same attempt, whose answer was lost: the call it marked, shown
    -- as it was before the mark.
    started = v[5] or ''
    local i = tonumber(string.match(started, '%.(%d+)$'))
    if i and calls[i + 1] then calls[i + 1][4] = false end
  elseif #start > 0 then
    local first, cancelled = nil, false
    for i, f in ipairs(calls) do
      if f[2] == 'cancelled' then cancelled = true end
      if not first and f[2] == 'decided' and f[3] then
        -- Its kind alone: the decision's edited arguments may nest deeper
        -- than cjson reads, and a script that fails here has taken the
        -- lease and the claim already. The kind is the JSON's first field.
        local kind = string.match(f[3], '^{"kind":"([^"]*)"')
        for _, k in ipairs(start) do
          if kind == k then first = i end
        end
      end
    end
    if first and not cancelled and calls[first][4] ~= '1' then
      started = id .. '.' .. (first - 1)
      redis.call('HSET', run .. ':call:' .. started, 'executing', '1', 'exec_nonce', nonce)
    end
  end
  -- The claim before this attempt's, as its first sending found it.
  local priorNonce, priorStart = v[4] or '', v[5] or ''
  if again then
    priorNonce, priorStart = v[6] or '', v[7] or ''
  else
    redis.call('HSET', run, 'claim_nonce', nonce, 'claim_start', started, 'claim_prior_nonce', priorNonce, 'claim_prior_start', priorStart)
  end
  return {'claimed', v[1], fin, calls, c, started, priorNonce, priorStart}
end
`

// beginResume is beginResumeFn as a script.
// KEYS: run, claim [, conversation [, lease]]
// ARGV: owner, ttl (ms), run id, nonce, again (1: only the nonce's own
// claim), then the decision kinds that start a call
// Returns what resume returns.
var beginResume = redis.NewScript(beginResumeFn + `
local start = {}
for j = 6, #ARGV do start[#start + 1] = ARGV[j] end
return resume(KEYS[1], KEYS[2], KEYS[3], KEYS[4], ARGV[1], ARGV[2], ARGV[3], start, ARGV[4], ARGV[5] == '1')
`)

// decidedResume is beginResumeFn, run only if the call holds the given
// decision and that decision is the one that completed the run's step:
// sent right after a decision, in the same pipeline but not atomically with
// it, it begins the resume of the step that this decision completed, and
// nothing else, however other decisions came in between (a single node
// only: the conversation and its lease are in other hash slots than the
// run).
// KEYS: call, run, claim, conversation[, lease] (none: no lease is taken)
// ARGV: decision JSON, owner, ttl (ms), run id, nonce, then the decision
// kinds that start a call
// Returns {'undecided'} if the call holds another decision or none, or
// another decision completed the step, else what resume returns.
var decidedResume = redis.NewScript(beginResumeFn + `
if redis.call('HGET', KEYS[1], 'decision') ~= ARGV[1] or redis.call('HGET', KEYS[2], 'completed') ~= KEYS[1] then
  return {'undecided'}
end
local start = {}
for j = 6, #ARGV do start[#start + 1] = ARGV[j] end
return resume(KEYS[2], KEYS[3], KEYS[4], KEYS[5], ARGV[2], ARGV[3], ARGV[4], start, ARGV[5], false)
`)
