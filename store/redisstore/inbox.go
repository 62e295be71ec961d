package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/fastjson"
	"github.com/toolgate/toolgate/store"
)

// The inbox of a conversation is a list under the conversation's hash tag,
// next to its de-duplication keys and its sequence counter, so one script
// accepts a message atomically on Redis Cluster too. The index of
// conversations with unanswered messages is one global sorted set (score:
// Unix ms of the oldest listing), written by separate commands in an order
// that keeps it right whatever interleaves: AcceptMessage lists the
// conversation after appending to the inbox, and AnswerInbox looks at the
// inbox again after unlisting it.

// RenewClaim extends owner's live resume claim. See storetest.Store for the
// contract. It goes out with the other renewals due on its node (see
// renew.go).
func (s *Store) RenewClaim(ctx context.Context, runID, owner string, lease time.Duration) (bool, error) {
	return s.renew(&renewal{ctx: ctx, run: runID, owner: owner, ttl: lease})
}

// ReleaseClaim deletes owner's resume claim, one script. See storetest.Store
// for the contract.
func (s *Store) ReleaseClaim(ctx context.Context, runID, owner string) error {
	if err := releaseClaim.Run(ctx, s.c, []string{s.claimKey(runID)}, owner).Err(); err != nil {
		return fmt.Errorf("release resume claim of run %s: %w", runID, err)
	}
	return nil
}

// AcceptMessage is one script, one round trip: on a single node (or a
// Sentinel primary) the script lists the conversation as unanswered too;
// on Redis Cluster it runs on the conversation's hash slot and one ZADD
// lists the conversation after it. See storetest.Store for the contract.
func (s *Store) AcceptMessage(ctx context.Context, conversation string, m store.Inbound, requireKnown bool) (store.Inbound, store.Acceptance, error) {
	m, acc, _, err := s.accept(ctx, conversation, m, requireKnown, "", 0, nil)
	return m, acc, err
}

// AcceptBegin is AcceptMessage and, for a message accepted, BeginTurn in
// the same script (acceptBegin), pipelined with the listings of the
// records of kinds: one round trip on a single node, and one more ZADD on
// Redis Cluster. See storetest.Store for the contract.
func (s *Store) AcceptBegin(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds ...string) (store.Inbound, store.Acceptance, store.Begun, error) {
	if ttl < time.Millisecond {
		return m, "", store.Begun{}, fmt.Errorf("accept message in %s: lease ttl %v is under 1ms", conversation, ttl)
	}
	return s.accept(ctx, conversation, m, requireKnown, owner, ttl, kinds)
}

// accept is AcceptMessage, and with an owner AcceptBegin.
func (s *Store) accept(ctx context.Context, conversation string, m store.Inbound, requireKnown bool, owner string, ttl time.Duration, kinds []string) (store.Inbound, store.Acceptance, store.Begun, error) {
	fail := func(err error) (store.Inbound, store.Acceptance, store.Begun, error) {
		return m, "", store.Begun{}, fmt.Errorf("accept message in %s: %w", conversation, err)
	}
	if m.At.IsZero() {
		m.At = time.Now()
	}
	m.Seq = 0
	raw, err := json.Marshal(m)
	if err != nil {
		return fail(err)
	}
	if !strings.HasPrefix(string(raw), `{"seq":0`) {
		return fail(fmt.Errorf("unexpected encoding %.20s", raw))
	}
	flag := func(b bool) string {
		if b {
			return "1"
		}
		return "0"
	}
	keys := []string{
		s.convKey(conversation), s.inboxKey(conversation), s.inboxSeqKey(conversation),
		s.convSeenKey(conversation, "event", m.EventID), s.convSeenKey(conversation, "msg", m.MsgID),
	}
	args := []any{
		flag(requireKnown), flag(m.EventID != ""), flag(m.MsgID != ""),
		store.DedupeTTL.Milliseconds(), raw, s.convTTL.Milliseconds(), time.Now().UnixMicro(),
		m.At.UnixMilli(), conversation,
	}
	script := acceptMessage
	if owner != "" {
		script = acceptBegin
		keys = append(keys, s.leaseKey(store.TurnLease(conversation)))
		args = append(args, owner, ttl.Milliseconds())
	}
	// Names this sending: the client sends a script again when its reply
	// is lost, and the message the first sending recorded must not then
	// be answered as a duplicate, with no turn begun.
	args = append(args, rand.Text())
	if !s.cluster {
		keys = append(keys, s.unansweredKey())
	}
	var res []any
	var begun []any
	var recs []*redis.MapStringStringCmd
	var version int64
	if owner == "" {
		res, err = script.Run(ctx, s.c, keys, args...).Slice()
	} else {
		var cmd *redis.Cmd
		cmd, recs, version = s.runWithRecords(ctx, script, keys, args, kinds)
		var both []any
		if both, err = cmd.Slice(); err == nil {
			res, _ = both[0].([]any)
			if len(both) > 1 {
				begun, _ = both[1].([]any)
			}
		}
	}
	if err != nil {
		return fail(err)
	}
	if len(res) != 4 {
		return fail(fmt.Errorf("unexpected reply %v", res))
	}
	code, _ := res[0].(string)
	left, _ := res[2].(int64)
	listed, _ := res[3].(int64)
	acc := store.Acceptance(code)
	switch acc {
	case store.Accepted:
		seq, _ := res[1].(string)
		if m.Seq, err = strconv.ParseInt(seq, 10, 64); err != nil {
			return fail(fmt.Errorf("bad seq %q", seq))
		}
	case store.Duplicate, store.Unknown:
	default:
		return fail(fmt.Errorf("unexpected reply %v", res))
	}
	if (acc == store.Accepted || acc == store.Duplicate && left > 0) && listed != 1 {
		// Listed after the append (see above); NX keeps an earlier time.
		err = s.c.ZAddNX(ctx, s.unansweredKey(), redis.Z{Score: float64(m.At.UnixMilli()), Member: conversation}).Err()
		if err != nil {
			return fail(fmt.Errorf("list unanswered: %w", err))
		}
	}
	var b store.Begun
	if begun != nil {
		if b, err = decodeBegun(conversation, begun, kinds, recs); err != nil {
			// The message is recorded: the turn begins on its own
			// (BeginTurn), and reports what it cannot read.
			b = store.Begun{}
		}
		if b.Acquired {
			b.RecordsVersion = version
		}
	}
	return m, acc, b, nil
}

// Inbox returns the conversation's unanswered messages in Seq order.
func (s *Store) Inbox(ctx context.Context, conversation string) ([]store.Inbound, error) {
	vals, err := s.c.LRange(ctx, s.inboxKey(conversation), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("read inbox of %s: %w", conversation, err)
	}
	out := make([]store.Inbound, 0, len(vals))
	for _, v := range vals {
		var m store.Inbound
		if err := fastjson.Unmarshal([]byte(v), &m); err != nil {
			return nil, fmt.Errorf("read inbox of %s: %w", conversation, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// AnswerInbox drops answered messages; once none is left it unlists the
// conversation, then lists it again if a message arrived meanwhile.
func (s *Store) AnswerInbox(ctx context.Context, conversation string, upTo int64) error {
	left, err := answerInbox.Run(ctx, s.c, []string{s.inboxKey(conversation)}, upTo).Int64()
	if err != nil {
		return fmt.Errorf("answer inbox of %s: %w", conversation, err)
	}
	if left > 0 {
		return nil
	}
	return s.unlist(ctx, conversation)
}

// unlist takes a conversation whose inbox was found empty out of the
// index of unanswered ones, then lists it again if a message arrived
// meanwhile.
func (s *Store) unlist(ctx context.Context, conversation string) error {
	if err := s.c.ZRem(ctx, s.unansweredKey(), conversation).Err(); err != nil {
		return fmt.Errorf("answer inbox of %s: unlist: %w", conversation, err)
	}
	return s.relist(ctx, conversation, "")
}

// relist lists a conversation just unlisted again if its inbox holds a
// message, or if run (when "": the run the conversation is paused on, as
// stored) has no call pending any more and is not finished: its step was decided, and a decision lists the conversation
// until the resume saves its result. On Redis Cluster a decision can come
// between the steps of a commit that pauses on run (the call is saved
// first), and its listing (ZADD NX, after the decision) finds the
// conversation still listed, so the commit's unlist would undo it; read
// after the unlist, the run shows any decision made before, and any made
// after lists the conversation itself.
func (s *Store) relist(ctx context.Context, conversation, run string) error {
	var inbox *redis.IntCmd
	var step *redis.SliceCmd
	var paused *redis.StringCmd
	// One round trip; each read's error is checked apart.
	_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		inbox = p.LLen(ctx, s.inboxKey(conversation))
		if run != "" {
			step = p.HMGet(ctx, s.runKey(run), "pending", "finished")
		} else {
			// The run the conversation is paused on, as stored.
			paused = p.HGet(ctx, s.convKey(conversation), "paused_run")
		}
		return nil
	})
	n, err := inbox.Result()
	if err != nil {
		return fmt.Errorf("answer inbox of %s: %w", conversation, err)
	}
	if n == 0 && paused != nil {
		if run, err = paused.Result(); err != nil && !errors.Is(err, redis.Nil) {
			return fmt.Errorf("answer inbox of %s: %w", conversation, err)
		}
		if run != "" {
			step = s.c.HMGet(ctx, s.runKey(run), "pending", "finished")
		}
	}
	if n == 0 && step != nil {
		f, err := step.Result()
		if err != nil {
			return fmt.Errorf("check run %s of %s: %w", run, conversation, err)
		}
		pending, _ := f[0].(string)
		finished, _ := f[1].(string)
		if pending == "0" && finished != "1" {
			n = 1
		}
	}
	if n > 0 {
		err = s.c.ZAddNX(ctx, s.unansweredKey(), redis.Z{Score: float64(time.Now().UnixMilli()), Member: conversation}).Err()
		if err != nil {
			return fmt.Errorf("answer inbox of %s: list again: %w", conversation, err)
		}
	}
	return nil
}

// MarkUnanswered lists the conversation (ZADD NX).
func (s *Store) MarkUnanswered(ctx context.Context, conversation string, at time.Time) error {
	err := s.c.ZAddNX(ctx, s.unansweredKey(), redis.Z{Score: float64(at.UnixMilli()), Member: conversation}).Err()
	if err != nil {
		return fmt.Errorf("list %s as unanswered: %w", conversation, err)
	}
	return nil
}

// Unanswered lists conversations listed at or before the given time,
// oldest first, past the first offset of them.
func (s *Store) Unanswered(ctx context.Context, before time.Time, offset, limit int) ([]string, error) {
	by := &redis.ZRangeBy{Min: "-inf", Max: strconv.FormatInt(before.UnixMilli(), 10), Offset: int64(max(offset, 0)), Count: -1}
	if limit > 0 {
		by.Count = int64(limit)
	}
	ids, err := s.c.ZRangeByScore(ctx, s.unansweredKey(), by).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("list unanswered conversations: %w", err)
	}
	return ids, nil
}
