package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/toolgate/toolgate/internal/fastjson"
	"github.com/toolgate/toolgate/store"
)

// Turns starts and records turns, one store operation each: BeginTurn
// takes the conversation's lease and reads what the turn starts from (with
// the records of kinds, those the policy judges by);
// CommitTurn writes what the turn recorded (its conversation, a run
// created or finished, audit entries, the messages it answered) and
// releases the lease with the turn's last write.
type Turns interface {
	BeginTurn(ctx context.Context, conversation, owner string, ttl time.Duration, kinds ...string) (store.Begun, error)
	CommitTurn(ctx context.Context, c store.Commit) error
}

// commit writes c for the conversation c.Key in one store operation,
// with the audit entries t noted since its last write (t may be nil).
// With last, nothing more is written for the conversation under the
// lease that ctx holds, so the commit releases it (its renewal stops
// first). A commit that finishes the run whose resume claim ctx holds
// ends the need for the claim (see claim). On an error the entries stay
// noted for the next write.
func (a *Agent) commit(ctx context.Context, t *turn, c store.Commit, last bool) error {
	if t != nil {
		t.waitSaves()
		c.Audit = t.audits
		if len(t.stepAudits) > 0 {
			c.Audit = append(slices.Clip(t.stepAudits), t.audits...)
		}
	}
	if cl := claimOf(ctx, c.Finish); cl != nil {
		cl.finishing.Store(true)
	}
	h := holdOf(ctx, c.Key)
	if h != nil {
		// Written only while no one else holds the conversation: a
		// process stalled past its lease, whose conversation another
		// process took over, finds out here at the latest.
		c.Holder = h.holder
	}
	if last && h != nil {
		h.stopRenewing()
		c.Release = h.holder
	}
	if err := a.store.CommitTurn(ctx, c); err != nil {
		if h != nil && errors.Is(err, store.ErrNotHolder) {
			err = fmt.Errorf("%w: %w", ErrLeaseLost, err)
			h.lose(err)
		}
		return fmt.Errorf("record the turn: %w", err)
	}
	if t != nil {
		a.committed(ctx, t, len(t.audits))
	}
	if c.Release != "" {
		h.released = true
	}
	return nil
}

// committed forgets what a write of t stored: its step entries (see
// interrupted), logged now, and the first n of its other entries, with
// the saves among them that saved nothing (see flushAudits). Entries
// noted after those stay for the next write.
func (a *Agent) committed(ctx context.Context, t *turn, n int) {
	for _, e := range t.stepAudits {
		e.Log(ctx, a.log)
	}
	for _, e := range t.audits[:n] {
		if s := t.unsaved[e.CallID]; s != nil && e == s.entry {
			delete(t.unsaved, e.CallID)
		}
	}
	t.audits, t.stepAudits = slices.Clone(t.audits[n:]), nil
	if len(t.audits) == 0 {
		t.audits, t.unsaved = nil, nil
	}
}

// note logs an audit entry at once and keeps it for the turn's next write,
// so it is stored with what it is about (see commit).
func (a *Agent) note(ctx context.Context, t *turn, e store.AuditEntry) {
	t.audits = append(t.audits, a.logged(ctx, e))
}

// logged logs an audit entry, dated now if it has no time, and returns it
// so dated.
func (a *Agent) logged(ctx context.Context, e store.AuditEntry) store.AuditEntry {
	if e.At.IsZero() {
		e.At = a.cfg.Now()
	}
	e.Log(ctx, a.log)
	return e
}

// resultSave is a call's result being saved with its audit entry (see
// saveResult).
type resultSave struct {
	entry   store.AuditEntry
	callID  string
	result  []byte
	audited bool // the store appended entry with the result
	saved   bool // the store saved the result, with entry or not
}

// waitSaves waits for the results the turn is saving, and keeps for its
// next write the audit entries of those the store did not append (and,
// among unsaved, the saves that saved nothing). A save with no entry
// (a call that did not run, or may run again) leaves none.
func (t *turn) waitSaves() {
	t.saving.Wait()
	for _, s := range t.saves {
		if s.audited || s.entry.Action == "" {
			continue
		}
		t.audits = append(t.audits, s.entry)
		if !s.saved {
			if t.unsaved == nil {
				t.unsaved = map[string]*resultSave{}
			}
			t.unsaved[s.callID] = s
		}
	}
	t.saves = nil
}

// flushAudits writes the entries noted by a turn that ended without
// another write (an error, a lost lease), one by one, as audit did. It is
// deferred by every turn, so it also waits for the turn's results being
// saved (see saveResult): none outlives its turn. The execution of a call
// whose result was not saved is saved once more with its entry, not
// audited alone: the run it belongs to is not finished, and the resume
// that takes it over finds the call started; with the result saved it
// reports that, and without it saves the outcome as unknown, with its own
// entry, which would be a second.
func (a *Agent) flushAudits(ctx context.Context, t *turn) {
	t.waitSaves()
	ctx = context.WithoutCancel(ctx)
	for _, e := range t.audits {
		if s := t.unsaved[e.CallID]; s != nil && e == s.entry {
			err := a.store.SaveResult(ctx, s.callID, s.result, e)
			switch {
			case err == nil:
				continue
			case !errors.Is(err, store.ErrEffects):
				a.log.Warn("save tool result; the resume that takes the run over reports and audits its outcome as unknown", "call", s.callID, "err", err)
				continue
			}
		}
		if err := a.store.Audit(ctx, e); err != nil {
			a.log.Warn("write audit entry", "action", e.Action, "call", e.CallID, "err", err)
		}
	}
	t.audits, t.unsaved = nil, nil
}

// TakenIn reports whether the conversation has taken in the message of
// req (recorded by Accept): answered it, or queued it behind a paused
// step, which answers it after its resume. A message not taken in waits
// in the inbox for a turn, a takeover or a restart. A message recorded
// before, whose record Accept found a duplicate (req.Seq zero), is looked
// for in the inbox.
func (a *Agent) TakenIn(ctx context.Context, req Request) (bool, error) {
	if req.Seq == 0 {
		in, err := a.store.Inbox(ctx, req.Conversation)
		if err != nil {
			return false, err
		}
		waits := slices.ContainsFunc(in, func(m store.Inbound) bool {
			return req.MsgID != "" && m.MsgID == req.MsgID || req.EventID != "" && m.EventID == req.EventID
		})
		return !waits, nil
	}
	c, err := a.store.LoadConversation(ctx, req.Conversation)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	cs, _, err := conversationOf(c, true)
	return cs.InboxSeq >= req.Seq, err
}

// conversationOf decodes a conversation's state and the run it is paused
// on; found is false for a conversation with no record (new, or expired).
func conversationOf(c store.Conversation, found bool) (cs convState, pausedRun string, err error) {
	if !found {
		return convState{}, "", nil
	}
	if len(c.State) > 0 {
		if err := fastjson.Unmarshal(c.State, &cs); err != nil {
			return convState{}, "", fmt.Errorf("decode conversation %s: %w", c.Key, err)
		}
		if err := cs.Step.check(cs.Messages); err != nil {
			return convState{}, "", fmt.Errorf("decode conversation %s: %w", c.Key, err)
		}
	}
	return cs, c.PausedRun, nil
}

// convRecord returns the store record of a conversation's state.
func (a *Agent) convRecord(cs convState, pausedRun string) *store.Conversation {
	return &store.Conversation{State: encodeState(cs), PausedRun: pausedRun, UpdatedAt: a.cfg.Now()}
}
