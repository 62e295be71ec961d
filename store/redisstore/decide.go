package redisstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/internal/ctxtime"
	"github.com/toolgate/toolgate/internal/fastjson"
	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/internal/newrun"
)

// DecideAudited is one Lua script, so one round trip, with its effects on
// one Redis node; on a Cluster the effects, in other hash slots, follow in
// one pipeline. See storetest.Store for the contract. A zero d.At is set
// to now. The call leaves the indexes lazily, when a reader next finds it
// decided.
func (s *Store) DecideAudited(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	c, complete, _, err := s.decideBegin(ctx, callID, fingerprint, d, fx, nil)
	return c, complete, err
}

// DecideBegin is DecideAudited and, when the decision completes its step,
// BeginResume: on a single node (or a Sentinel primary) the decision's
// script, a script that begins the resume only if the call holds this
// decision (decidedResume) and the listings of the records asked for, in
// one pipeline (one round trip); on a Cluster, two (see clusterSend). See
// storetest.Store for the contract.
func (s *Store) DecideBegin(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	if err := s.canBegin(r); err != nil {
		return store.Call{}, false, store.ResumeStart{}, fmt.Errorf("decide call %s: %w", callID, err)
	}
	return s.decideBegin(ctx, callID, fingerprint, d, fx, &r)
}

// canBegin checks what DecideBegin and ApproveBegin take to begin a
// resume.
func (s *Store) canBegin(r store.ResumeBegin) error {
	if r.TTL < time.Millisecond {
		return fmt.Errorf("resume ttl %v is under 1ms", r.TTL)
	}
	return nil
}

// decideBegin is DecideAudited, and with r DecideBegin.
func (s *Store) decideBegin(ctx context.Context, callID, fingerprint string, d store.Decision, fx store.Effects, r *store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	fail := func(c store.Call, err error) (store.Call, bool, store.ResumeStart, error) {
		return c, false, store.ResumeStart{}, fmt.Errorf("decide call %s: %w", callID, err)
	}
	runID := store.RunOf(callID)
	if runID == "" {
		return fail(store.Call{}, store.ErrNotFound)
	}
	if s.cluster && fx.IfRecords != 0 {
		// A Cluster keeps no version of the records: no condition on one
		// holds.
		return fail(store.Call{}, store.ErrStale)
	}
	if d.At.IsZero() {
		d.At = time.Now()
	}
	dj, err := store.EncodeJSON(d)
	if err != nil {
		return fail(store.Call{}, err)
	}
	fx.Audit.At = cmpTime(fx.Audit.At, d.At)
	entry, err := auditArg(fx.Audit)
	if err != nil {
		return fail(store.Call{}, err)
	}
	keys, effects := s.effectsOf(callID, entry, fx, d.At)
	args := []any{fingerprint, d.Kind, d.At.UnixMicro(), dj, string(newrun.Outcome(d.Kind))}
	script := decide
	if fx.HeldAsJudged() {
		edited, judged, err := heldArgs(fx)
		if err != nil {
			return fail(store.Call{}, err)
		}
		script = decideHeld
		if fx.IfRecords != 0 {
			script = decideIf
			keys = append(keys, s.recordsVersionKey())
		}
		args = append(args, fx.IfRecords-1, edited, judged)
	}
	args = append(args, effects...)
	p := s.send(ctx, script, keys, args, callID, dj, d.At, r)
	code, c, left, tail, err := s.decoded(ctx, p, r)
	if err != nil {
		return fail(c, err)
	}
	if code == "decided" && sameDecision(c.Decision, d) {
		// This very decision, sent again by the client after its reply
		// was cut (go-redis resends a command or pipeline whose reply an
		// EOF or a read time-out lost), or by the caller that found it
		// recorded after its answer was lost: it stands, as the first
		// sending recorded it, whose follow-up may never have been made
		// (on a Cluster; the follow-up writes its audit entry once, see
		// addEffects).
		if left, err = s.leftBy(ctx, runID, callID); err != nil {
			return fail(c, s.keepOrGiveBack(ctx, p, r, err))
		}
		code, tail = "ok", ""
	}
	switch code {
	case "ok":
		rs, err := s.begun(ctx, p, left == 0, runID, r, fx, d.At, s.auditSentKey(callID, d.Attempt), tail)
		if err = errors.Join(err, p.listFailure(left == 0)); err != nil {
			err = fmt.Errorf("decide call %s: %w", callID, err)
		}
		return c, left == 0, rs, err
	case "early":
		s.giveBack(ctx, p, r)
		return c, false, store.ResumeStart{}, fmt.Errorf("decide call %s: expire before %s: %w",
			callID, c.ExpiresAt.Format(time.RFC3339), store.ErrConflict)
	case "stale":
		// The call holds other approvals, or edit, than judged.
		s.giveBack(ctx, p, r)
		return fail(c, store.ErrStale)
	}
	s.giveBack(ctx, p, r)
	return fail(c, refusal(code))
}

// heldArgs are the arguments of the decideIf, decideHeld, approveIf and
// approveHeld scripts that say which approvals and edit a decision was
// judged with (see store.Condition.IfApprovers): 1 if the call has a
// pending edit (else 0), and the approvers of its approvals as JSON.
func heldArgs(fx store.Effects) (edited int, judged string, err error) {
	b, err := store.EncodeJSON(append([]string{}, fx.IfApprovers...))
	if fx.IfEdited {
		edited = 1
	}
	return edited, string(b), err
}

// decoded decodes the reply of a decision's or an approval's script sent
// by send (see decodeDecision); an error for a reply that was lost (the
// lease clusterSend took kept as keepOrGiveBack keeps it), is stale
// (store.ErrStale, with no call when the records changed) or cannot be
// read (the lease given back).
func (s *Store) decoded(ctx context.Context, p *pipelinedResume, r *store.ResumeBegin) (code string, c store.Call, left int64, tail string, err error) {
	if p.err != nil {
		return "", store.Call{}, 0, "", s.keepOrGiveBack(ctx, p, r, p.err)
	}
	if code, _ := p.res[0].(string); len(p.res) == 1 && code == "stale" {
		s.giveBack(ctx, p, r)
		return code, store.Call{}, 0, "", store.ErrStale
	}
	code, c, left, tail, err = decodeDecision(p.res)
	if err != nil {
		s.giveBack(ctx, p, r)
	}
	return code, c, left, tail, err
}

// pipelinedResume is the reply of a decision's or an approval's script,
// and, when it was sent with a resume to begin, the replies of
// decidedResume and of the records' listings (withResume), or of the
// conversation's lease taken beside it (clusterSend); on a Cluster, also
// the failure to list the run for Stalled (see clusterSend).
type pipelinedResume struct {
	res      []any
	err      error
	resumed  *redis.Cmd
	recs     []*redis.MapStringStringCmd
	lease    *redis.Cmd
	unlisted error
}

// send sends script (a decision's or an approval's, made at at, on the
// call callID, whose decision when recorded is dj): on a single node
// alone without r, and with r in one pipeline with what begins the resume
// of the step it completes (withResume); on a Cluster beside the run's
// listing and, with r, the first half of what begins the resume
// (clusterSend).
func (s *Store) send(ctx context.Context, script *redis.Script, keys []string, args []any, callID string, dj []byte, at time.Time, r *store.ResumeBegin) *pipelinedResume {
	switch {
	case s.cluster:
		return s.clusterSend(ctx, script, keys, args, store.RunOf(callID), at, r)
	case r == nil:
		res, err := script.Run(ctx, s.c, keys, args...).Slice()
		return &pipelinedResume{res: res, err: err}
	}
	return s.withResume(ctx, script, keys, args, callID, dj, *r)
}

// withResume sends script (a decision's or an approval's, on the call
// callID, whose decision when recorded is dj) in one pipeline with
// decidedResume, which begins the resume of the step it completes as r
// asks, and the listings of r.Kinds' records: one round trip on a single
// node.
func (s *Store) withResume(ctx context.Context, script *redis.Script, keys []string, args []any, callID string, dj []byte, r store.ResumeBegin) *pipelinedResume {
	runID := store.RunOf(callID)
	rkeys := []string{s.callKey(callID), s.runKey(runID), s.claimKey(runID), s.convKey(r.Conversation)}
	if r.Lease != "" {
		// Without one the caller holds the conversation (see
		// store.ResumeBegin), and the script takes no lease: the key of
		// an empty name is no conversation's.
		rkeys = append(rkeys, s.leaseKey(r.Lease))
	}
	rargs := []any{string(dj), r.Owner, r.TTL.Milliseconds(), runID, r.Nonce}
	for _, k := range r.Start {
		rargs = append(rargs, k)
	}
	p := &pipelinedResume{recs: make([]*redis.MapStringStringCmd, len(r.Kinds))}
	var decided *redis.Cmd
	// Each command's error is checked apart.
	_, _ = s.c.Pipelined(ctx, func(pl redis.Pipeliner) error {
		decided = script.EvalSha(ctx, pl, keys, args...)
		p.resumed = decidedResume.EvalSha(ctx, pl, rkeys, rargs...)
		for i, k := range r.Kinds {
			p.recs[i] = pl.HGetAll(ctx, s.recordsKey(k))
		}
		return nil
	})
	if redis.HasErrorPrefix(decided.Err(), "NOSCRIPT") {
		// Nothing ran (the resume found no decision of this call):
		// once more, each script alone, loaded if need be.
		decided = script.Run(ctx, s.c, keys, args...)
		p.resumed = decidedResume.Run(ctx, s.c, rkeys, rargs...)
	} else if redis.HasErrorPrefix(p.resumed.Err(), "NOSCRIPT") {
		p.resumed = decidedResume.Run(ctx, s.c, rkeys, rargs...)
	}
	p.res, p.err = decided.Slice()
	return p
}

// clusterSend sends script, a decision's made at at on a call of run
// runID, on a Cluster, in one pipeline with the run's move in the runs
// index (listDecided), written again a few times if its part fails and
// the decision may have been made (the run stays listed by its expiry
// otherwise), and, when r
// names the conversation's lease r.Lease, with the script that takes it
// for r.Owner, in another hash slot (without one the caller holds it):
// the lease is taken before it is known whether the decision completes
// its step, and given back when it does not (giveBack). The claim of the
// run, and what the resume reads, follow in a second round trip (see
// begun).
func (s *Store) clusterSend(ctx context.Context, script *redis.Script, keys []string, args []any, runID string, at time.Time, r *store.ResumeBegin) *pipelinedResume {
	p := &pipelinedResume{}
	var lkeys []string
	if r != nil && r.Lease != "" {
		lkeys = []string{s.leaseKey(r.Lease)}
	}
	var decided *redis.Cmd
	var listing []redis.Cmder
	// Each command's error is checked apart.
	_, _ = s.c.Pipelined(ctx, func(pl redis.Pipeliner) error {
		decided = script.EvalSha(ctx, pl, keys, args...)
		listing = s.listDecided(ctx, pl, runID, at)
		if lkeys != nil {
			p.lease = acquireLease.EvalSha(ctx, pl, lkeys, r.Owner, r.TTL.Milliseconds())
		}
		return nil
	})
	if redis.HasErrorPrefix(decided.Err(), "NOSCRIPT") {
		decided = script.Run(ctx, s.c, keys, args...)
	}
	if p.lease != nil && redis.HasErrorPrefix(p.lease.Err(), "NOSCRIPT") {
		p.lease = acquireLease.Run(ctx, s.c, lkeys, r.Owner, r.TTL.Milliseconds())
	}
	if failure(listing, nil, nil) != nil && mayBeMade(decided) {
		wctx := context.WithoutCancel(ctx)
		p.unlisted = writeAgain(wctx, func() error {
			pl := s.c.Pipeline()
			s.listDecided(wctx, pl, runID, at)
			_, err := pl.Exec(wctx)
			return err
		})
	}
	p.res, p.err = decided.Slice()
	return p
}

// mayBeMade reports whether the reply of a decision's or an approval's
// script leaves it possible that the decision was made: lost, or one that
// was (sent again too), as opposed to a refusal.
func mayBeMade(reply *redis.Cmd) bool {
	res, err := reply.Slice()
	if err != nil || len(res) == 0 {
		return true
	}
	code, _ := res[0].(string)
	return code == "ok" || code == "counted" || code == "decided"
}

// listDecided adds to p, on a Cluster, what moves run runID, on which a
// decision made at at is sent, to that time in the runs index, and returns
// its commands: Stalled reads it from then on, not only once its expiry
// passes (see runIndex). The decision's script cannot do it (the index is
// in another hash slot), so it goes beside the script, whatever the
// script answers (a run whose calls are still pending is passed over by
// Stalled), and never moves an entry later; a run that is not listed (an
// earlier version's trim) is listed again. The index is kept at least as
// long as a run decided at at can be resumed: its conversation's time,
// and the retention after it.
func (s *Store) listDecided(ctx context.Context, p redis.Pipeliner, runID string, at time.Time) []redis.Cmder {
	add := p.ZAddLT(ctx, s.runsKey(), redis.Z{Score: float64(at.UnixMilli()), Member: runID})
	return append(expireAtLeast(ctx, p, s.runsKey(), at.Add(s.convTTL+s.retention)), add)
}

// listFailure returns, for a decision that completed its step (complete),
// the failure to list its run for Stalled (see clusterSend), wrapped in
// store.ErrEffects: the decision stands.
func (p *pipelinedResume) listFailure(complete bool) error {
	if !complete || p.unlisted == nil {
		return nil
	}
	return fmt.Errorf("%w: list the run for the stalled-resume sweep: %w", store.ErrEffects, p.unlisted)
}

// leased reports whether clusterSend took the conversation's lease.
func (p *pipelinedResume) leased() bool {
	if p.lease == nil {
		return false
	}
	n, err := p.lease.Int()
	return err == nil && n == 1
}

// giveBack gives back the lease clusterSend took for a decision that
// begins no resume (refused, or leaving calls pending); a failure is left
// to the lease's ttl.
func (s *Store) giveBack(ctx context.Context, p *pipelinedResume, r *store.ResumeBegin) {
	if p.leased() {
		_ = s.ReleaseLease(context.WithoutCancel(ctx), r.Lease, r.Owner)
	}
}

// keepOrGiveBack is giveBack after err, a decision whose reply was lost:
// the lease is kept when the attempt can be asked again, as BeginResume
// keeps it (its claim may have been taken, on a single node); it returns
// err.
func (s *Store) keepOrGiveBack(ctx context.Context, p *pipelinedResume, r *store.ResumeBegin, err error) error {
	if r != nil && r.Nonce == "" {
		s.giveBack(ctx, p, r)
	}
	return err
}

// begun begins the resume of the step a decision completed (complete), as
// p was sent to, and writes the decision's effects (see followEffects;
// mark is its sending's mark, tail is the audit log's oldest entry the
// script read): on a single node it reads what decidedResume
// began (asking for the claim again if its reply was lost: see
// store.ResumeBegin) and the effects were the script's; on a Cluster,
// with the lease clusterSend took, it claims the run and reads what the
// resume needs, the effects in the same pipeline. The error is the
// effects' (store.ErrEffects): the decision stands, and a resume that
// could not be begun is begun as usual later; but a resume whose claim
// was asked for by a named attempt and whose answer was lost, even when
// asked again, is an error that is not the effects': the caller recovers
// that attempt as a lost decision's (and sends the decision again for
// the effects, which may not have been written: see addEffects).
func (s *Store) begun(ctx context.Context, p *pipelinedResume, complete bool, runID string, r *store.ResumeBegin, fx store.Effects, at time.Time, mark, tail string) (store.ResumeStart, error) {
	if r == nil {
		return store.ResumeStart{}, s.followEffects(ctx, complete, fx, at, mark, tail)
	}
	if !s.cluster {
		var rs store.ResumeStart
		if p.resumed != nil && complete {
			var lost bool
			rs, lost = s.decodeDecidedResume(r.Conversation, p.resumed, r.Kinds, p.recs)
			if lost {
				ars, err := s.askAgain(ctx, runID, *r)
				if err != nil && r.Nonce != "" {
					// As on a Cluster: the claim and the call's mark
					// may have been taken, their answer lost, and the
					// caller recovers the attempt as a lost decision's.
					// The decision's effects were its script's.
					return store.ResumeStart{}, fmt.Errorf("begin the resume of the decided run: %w", err)
				}
				rs = ars
			}
		}
		return rs, s.followEffects(ctx, complete, fx, at, mark, tail)
	}
	if !complete || r.Lease != "" && !p.leased() {
		// Nothing to begin, or the lease not taken: another owner
		// holds the conversation (Busy), or it could not be told.
		s.giveBack(ctx, p, r)
		return store.ResumeStart{Busy: complete}, s.followEffects(ctx, complete, fx, at, mark, tail)
	}
	var e *clusterEffects
	held := *r
	held.Lease = "" // clusterSend took it
	rs, err := s.beginResumeWith(ctx, runID, held, func(pl redis.Pipeliner) {
		e = s.addEffects(ctx, pl, complete, fx, at, mark)
	})
	if err != nil {
		// Asked again with the lease, which BeginResume keeps or gives
		// back as it does its own.
		rs, err = s.askAgain(ctx, runID, *r)
	}
	switch {
	case err != nil && r.Nonce != "":
		// The claim and the call's mark may have been taken, their
		// answer lost: the caller asks for that attempt's claim until
		// the store answers, and takes the mark back if the claim
		// lapsed meanwhile (see store.ResumeBegin), as after a lost
		// decision. Its lease is kept for that.
		return store.ResumeStart{}, fmt.Errorf("begin the resume of the decided run: %w", err)
	case err != nil:
		rs = store.ResumeStart{}
		s.giveBack(ctx, p, r)
	case !rs.Claimed:
		s.giveBack(ctx, p, r)
	}
	tail, err = e.tail(tail)
	if err != nil {
		return rs, err
	}
	s.trimStale(ctx, fx, tail)
	return rs, nil
}

// askAgain asks again for the claim of the attempt r names, whose answer
// may have been lost after it took the claim (see store.ResumeBegin); an
// attempt with no name, or a done ctx, gets an error.
func (s *Store) askAgain(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	if r.Nonce == "" || ctx.Err() != nil {
		return store.ResumeStart{}, errors.New("not asked again")
	}
	r.Again = true
	return s.beginResume(ctx, runID, r)
}

// sameDecision reports whether stored is d, recorded by an earlier
// sending of it (see store.Decision.Attempt).
func sameDecision(stored *store.Decision, d store.Decision) bool {
	return stored != nil && d.Attempt != "" && stored.Attempt == d.Attempt
}

// leftBy returns 0 if the decision on callID completed its run's step
// (see the decide script's completed field), and 1 otherwise.
func (s *Store) leftBy(ctx context.Context, runID, callID string) (int64, error) {
	completed, err := s.c.HGet(ctx, s.runKey(runID), "completed").Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, err
	}
	if completed == s.callKey(callID) {
		return 0, nil
	}
	return 1, nil
}

// decodeDecidedResume decodes the reply of decidedResume, with the
// records read beside it. A reply that cannot be read gives a zero
// ResumeStart and lost: the decision stands, and a claim the script may
// have taken is the caller's to ask for again (see store.ResumeBegin), or
// lapses (the resume then begins once it has).
func (s *Store) decodeDecidedResume(conversation string, cmd *redis.Cmd, kinds []string, recs []*redis.MapStringStringCmd) (rs store.ResumeStart, lost bool) {
	vals, err := cmd.Slice()
	if err != nil || len(vals) == 0 {
		return store.ResumeStart{}, true
	}
	if code, _ := vals[0].(string); code == "undecided" {
		return store.ResumeStart{}, false
	}
	rs, err = decodeResume(conversation, vals, nil)
	if err != nil {
		return store.ResumeStart{}, true
	}
	if rs.Claimed {
		rs.Records = records(kinds, recs)
	}
	return rs, false
}

// ApproveAudited is one Lua script, like DecideAudited: see storetest.Store
// for the contract. A zero a.At or d.At is set to now.
func (s *Store) ApproveAudited(ctx context.Context, callID, fingerprint string, a store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects) (store.Call, bool, error) {
	c, complete, _, err := s.approveBegin(ctx, callID, fingerprint, a, drop, edit, need, d, fx, nil)
	return c, complete, err
}

// ApproveBegin is ApproveAudited and, when the approval decides the call
// and completes its step, BeginResume, as DecideBegin: one round trip on a
// single node, two on a Cluster. See storetest.Store for the contract.
func (s *Store) ApproveBegin(ctx context.Context, callID, fingerprint string, a store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects, r store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	if err := s.canBegin(r); err != nil {
		return store.Call{}, false, store.ResumeStart{}, fmt.Errorf("approve call %s: %w", callID, err)
	}
	return s.approveBegin(ctx, callID, fingerprint, a, drop, edit, need, d, fx, &r)
}

// approveBegin is ApproveAudited, and with r ApproveBegin.
func (s *Store) approveBegin(ctx context.Context, callID, fingerprint string, a store.Approval, drop []string, edit *store.Proposal, need int, d store.Decision, fx store.Effects, r *store.ResumeBegin) (store.Call, bool, store.ResumeStart, error) {
	fail := func(c store.Call, err error) (store.Call, bool, store.ResumeStart, error) {
		return c, false, store.ResumeStart{}, fmt.Errorf("approve call %s: %w", callID, err)
	}
	runID := store.RunOf(callID)
	if runID == "" {
		return fail(store.Call{}, store.ErrNotFound)
	}
	if s.cluster && fx.IfRecords != 0 {
		return fail(store.Call{}, store.ErrStale) // as decideBegin
	}
	now := time.Now()
	if a.At.IsZero() {
		a.At = now
	}
	if d.At.IsZero() {
		d.At = now
	}
	aj, err := store.EncodeJSON(a)
	if err != nil {
		return fail(store.Call{}, err)
	}
	dj, err := store.EncodeJSON(d)
	if err != nil {
		return fail(store.Call{}, err)
	}
	var ej, efp, eexp string
	if edit != nil {
		b, err := store.EncodeJSON(edit.Edit)
		if err != nil {
			return fail(store.Call{}, err)
		}
		ej, efp = string(b), edit.Fingerprint
		if at := edit.Edit.ExpiresAt; !at.IsZero() {
			eexp = strconv.FormatInt(at.UnixMicro(), 10)
		}
	}
	// The script completes the entry with its outcome and detail.
	fx.Audit.At = cmpTime(fx.Audit.At, a.At)
	fx.Audit.Outcome, fx.Audit.Detail = "", ""
	entry, err := auditArg(fx.Audit)
	if err != nil {
		return fail(store.Call{}, err)
	}
	if entry != "" {
		entry = entry[:len(entry)-1]
	}
	var dropped string
	if len(drop) > 0 {
		b, err := store.EncodeJSON(drop)
		if err != nil {
			return fail(store.Call{}, err)
		}
		dropped = string(b)
	}
	var reminders string
	if eexp != "" {
		var err error
		if reminders, err = s.editReminders(ctx, callID, edit.Edit.ExpiresAt); err != nil {
			return fail(store.Call{}, err)
		}
		// The due index lists the call at the edit's earlier expiry
		// before the script moves it there (LT: never later than an
		// entry it has): an entry earlier than the call's expiry, if the
		// script refuses the edit, is moved to it by Due or NextExpiry,
		// never trimmed (see runIndex).
		z := redis.Z{Score: float64(edit.Edit.ExpiresAt.UnixMilli()), Member: callID}
		if err := s.c.ZAddLT(ctx, s.dueKey(), z).Err(); err != nil {
			return fail(store.Call{}, fmt.Errorf("index the edit's expiry: %w", err))
		}
	}
	keys, effects := s.effectsOf(callID, entry, fx, a.At)
	// The decision's Attempt, or else rand.Text, names this sending (see
	// BeginExecution): the caller that sends it again after its answer
	// was lost has it answered as the first sending was.
	sending := cmp.Or(d.Attempt, rand.Text())
	args := []any{fingerprint, a.At.UnixMicro(), a.Approver, aj, need,
		dj, string(newrun.Outcome(d.Kind)), ej, efp, sending, dropped, eexp, reminders}
	script := approve
	if fx.HeldAsJudged() {
		edited, judged, err := heldArgs(fx)
		if err != nil {
			return fail(store.Call{}, err)
		}
		announce := string(fx.Announce)
		if r != nil && len(r.Announce) > 0 {
			announce = string(r.Announce)
		}
		script = approveHeld
		if fx.IfRecords != 0 {
			script = approveIf
			keys = append(keys, s.recordsVersionKey())
		}
		args = append(args, fx.IfRecords-1, edited, judged, announce, s.pausesChannel())
	}
	args = append(args, effects...)
	p := s.send(ctx, script, keys, args, callID, dj, a.At, r)
	code, c, left, tail, err := s.decoded(ctx, p, r)
	if err != nil {
		return fail(c, err)
	}
	switch code {
	case "ok", "counted":
		complete := code == "ok" && left == 0
		if eexp != "" && c.Status == store.Pending {
			// Again once the script has run: a reader that read the call
			// before the script and moved its early entries later after
			// the listings above (see moveLater) leaves them later than
			// the expiry and the next reminder the script set. A failure
			// leaves those listings, which stand but for such a reader.
			ix := s.c.Pipeline()
			ix.ZAddArgs(ctx, s.dueKey(), redis.ZAddArgs{XX: true, LT: true, Members: []redis.Z{{Score: float64(c.ExpiresAt.UnixMilli()), Member: callID}}})
			if !c.RemindAt.IsZero() {
				ix.ZAddArgs(ctx, s.remindKey(), redis.ZAddArgs{XX: true, LT: true, Members: []redis.Z{{Score: float64(c.RemindAt.UnixMilli()), Member: callID}}})
			}
			_, _ = ix.Exec(ctx)
		}
		if fx.Audit.Action != "" {
			fx.Audit = store.ApprovalAudit(fx.Audit, len(c.Approvals), need)
		}
		rs, err := s.begun(ctx, p, complete, runID, r, fx, a.At, s.auditSentKey(callID, sending), tail)
		if err = errors.Join(err, p.listFailure(complete)); err != nil {
			err = fmt.Errorf("approve call %s: %w", callID, err)
		}
		return c, complete, rs, err
	case "duplicate":
		s.giveBack(ctx, p, r)
		return fail(c, store.ErrDuplicateApproval)
	case "stale":
		s.giveBack(ctx, p, r)
		return fail(c, store.ErrStale)
	}
	s.giveBack(ctx, p, r)
	return fail(c, refusal(code))
}

// editReminders returns the reminder times (Unix µs, space-separated)
// that the call has under an edit's expiry exp, from which the approve
// script sets its next reminder if the edit brings the expiry forward (see
// store.NextRemindAt). They depend on when the call paused and on its
// remind-after, which never change, so they are read before the script.
// The reminder index lists the call at the reminder the script will set,
// or an earlier one, before the script runs (LT, as the due index): a
// claim or a refusal in between leaves the entry earlier than the call's
// reminder, which readers move (see DueReminders), never later, which
// would delay the reminder. An unknown call has none: the script refuses
// it.
func (s *Store) editReminders(ctx context.Context, callID string, exp time.Time) (string, error) {
	vals, err := s.c.HMGet(ctx, s.callKey(callID), callFields...).Result()
	if err != nil {
		return "", fmt.Errorf("read the call's reminders: %w", err)
	}
	c, ok, err := decodeCall(vals)
	if err != nil || !ok {
		return "", err
	}
	c.ExpiresAt = exp.Truncate(time.Microsecond) // as the script keeps it
	times := store.Reminders(c)
	us := make([]string, len(times))
	for i, t := range times {
		us[i] = strconv.FormatInt(t.UnixMicro(), 10)
	}
	if next := store.NextRemindAt(c); !next.IsZero() && next.Before(c.RemindAt) {
		z := redis.Z{Score: float64(next.UnixMilli()), Member: callID}
		if err := s.c.ZAddLT(ctx, s.remindKey(), z).Err(); err != nil {
			return "", fmt.Errorf("index the edit's reminder: %w", err)
		}
	}
	return strings.Join(us, " "), nil
}

// cmpTime returns t, or def when t is zero.
func cmpTime(t, def time.Time) time.Time {
	if t.IsZero() {
		return def
	}
	return t
}

// auditArg is the JSON of an audit entry, or "" for one without an Action.
func auditArg(e store.AuditEntry) (string, error) {
	if e.Action == "" {
		return "", nil
	}
	b, err := store.EncodeJSON(e)
	if err != nil {
		return "", fmt.Errorf("audit %s: %w", e.Action, err)
	}
	return string(b), nil
}

// effectsOf returns the keys of the decide and approve scripts on a call,
// and the effects arguments that end their ARGV. On a Cluster the scripts
// get the call's keys only, and followEffects writes the effects.
func (s *Store) effectsOf(callID, entry string, fx store.Effects, at time.Time) (keys []string, args []any) {
	keys = []string{s.callKey(callID), s.runKey(store.RunOf(callID))}
	if s.cluster {
		return keys, []any{"", 0, "", 0}
	}
	keys = append(keys, s.auditKey(), s.unansweredKey(), s.runsKey())
	return keys, []any{entry, s.auditMax, fx.Unanswered, at.UnixMilli()}
}

// decodeDecision reads the reply of the decide and approve scripts.
func decodeDecision(res []any) (code string, c store.Call, left int64, tail string, err error) {
	code, _ = res[0].(string)
	if code == "notfound" {
		return code, store.Call{}, 0, "", store.ErrNotFound
	}
	n := 2 + len(callFields)
	if len(res) < n {
		return code, store.Call{}, 0, "", fmt.Errorf("unexpected script reply %v", res)
	}
	left, _ = res[1].(int64)
	c, _, err = decodeCall(res[2:n])
	if len(res) > n {
		tail, _ = res[n].(string)
	}
	return code, c, left, tail, err
}

// refusal is the error of a refused decision's script code.
func refusal(code string) error {
	switch code {
	case "decided":
		return store.ErrAlreadyDecided
	case "mismatch":
		return store.ErrFingerprintMismatch
	case "expired":
		return store.ErrExpired
	}
	return fmt.Errorf("unexpected script reply %q", code)
}

// followEffects writes, on a Cluster, the effects of a decision made at at
// that the script could not (see effectsOf; mark is its sending's mark),
// then trims audit entries past the retention time if the oldest one kept
// (tail) is (see trimAudit). A failure of the effects is returned wrapped
// in store.ErrEffects: the decision stands.
func (s *Store) followEffects(ctx context.Context, complete bool, fx store.Effects, at time.Time, mark, tail string) error {
	if s.cluster {
		// While the audit log's slot moves to another node (a live
		// reshard), the entry's script, which names a mark that does not
		// exist yet, is answered TRYAGAIN: it is sent again for a while,
		// added once for the sending whichever attempt makes it.
		wait := 50 * time.Millisecond
		for deadline := time.Now().Add(effectsWait); ; {
			var e *clusterEffects
			_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
				e = s.addEffects(ctx, p, complete, fx, at, mark)
				return nil
			})
			t, err := e.tail(tail)
			if err == nil {
				tail = t
				break
			}
			if !store.ClusterBusy(err) || time.Now().Add(wait).After(deadline) || ctxtime.Sleep(ctx, wait) != nil {
				return err
			}
			wait = min(2*wait, time.Second)
		}
	}
	s.trimStale(ctx, fx, tail)
	return nil
}

// effectsWait bounds how long a decision's effects are sent again while
// Redis Cluster answers that their slot is busy (see store.ClusterBusy).
const effectsWait = 10 * time.Second

// clusterEffects are the commands a decision's effects added to a
// pipeline on a Cluster (see addEffects).
type clusterEffects struct {
	err  error
	cmds []redis.Cmder
	last *redis.Cmd
}

// addEffects adds to p, on a Cluster, the effects of a decision made at at
// that its script could not write (see effectsOf): the audit entry, with
// a read of the log's oldest entry, and the conversation listed as
// unanswered when complete. With mark, the key of the decision's
// sending's mark (see auditSentKey), the entry is added once for that
// sending, which makes the follow-up again when it is sent again (see
// decideBegin), whether or not the follow-up was made before (its reply
// lost). Listing the conversation again changes nothing.
func (s *Store) addEffects(ctx context.Context, p redis.Pipeliner, complete bool, fx store.Effects, at time.Time, mark string) *clusterEffects {
	e := &clusterEffects{}
	entry, err := auditArg(fx.Audit)
	if err != nil {
		e.err = err
		return e
	}
	if entry != "" {
		keys := []string{s.auditKey()}
		if mark != "" {
			keys = append(keys, mark)
		}
		// Eval, not Run: a pipeline cannot fall back from EVALSHA.
		e.last = pushAuditOnce.Eval(ctx, p, keys, entry, s.auditMax, fx.Audit.At.Add(s.auditTTL).UnixMilli())
	}
	if fx.Unanswered != "" && complete {
		e.cmds = append(e.cmds, p.ZAddNX(ctx, s.unansweredKey(), redis.Z{Score: float64(at.UnixMilli()), Member: fx.Unanswered}))
	}
	return e
}

// tail returns the audit log's oldest entry once e's commands ran (def
// when none was read), or their failure, wrapped in store.ErrEffects.
func (e *clusterEffects) tail(def string) (string, error) {
	if e.err != nil {
		return "", fmt.Errorf("%w: %w", store.ErrEffects, e.err)
	}
	for _, c := range e.cmds {
		if err := c.Err(); err != nil {
			return "", fmt.Errorf("%w: %w", store.ErrEffects, err)
		}
	}
	if e.last == nil {
		return def, nil
	}
	tail, err := e.last.Text()
	if err != nil && !errors.Is(err, redis.Nil) {
		return "", fmt.Errorf("%w: %w", store.ErrEffects, err)
	}
	return tail, nil
}

// auditSentKey is the key of the mark of the sending named sending of a
// decision or an approval on call callID, set when its audit entry is
// added on a Cluster (see pushAuditOnce), or "" for a sending not named:
// in the audit log's hash slot, its hash tag being the log's whole key.
func (s *Store) auditSentKey(callID, sending string) string {
	if sending == "" {
		return ""
	}
	return s.prefix + ":{" + s.auditKey() + "}:sent:" + callID + ":" + sending
}

// trimStale trims the audit entries past the retention time if tail, the
// oldest entry kept after a decision's, is (see trimAudit).
func (s *Store) trimStale(ctx context.Context, fx store.Effects, tail string) {
	if tail == "" || fx.Audit.Action == "" {
		return
	}
	if cutoff := time.Now().Add(-s.auditTTL); staleAudit(tail, cutoff) {
		s.trimAudit(ctx, cutoff)
	}
}

// BeginResume is one pipeline on one Redis node: a Lua script that takes
// the lease and the claim and loads the run, its calls and the
// conversation, and the listings of the records asked for. On a Cluster,
// where the lease, the run and the conversation are in three hash slots,
// it takes the lease first (one script), then claims and loads the run and
// reads the rest (one pipeline), and releases the lease again if the claim
// was not taken. See storetest.Store for the contract.
func (s *Store) BeginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	rs, err := s.beginResume(ctx, runID, r)
	if err != nil {
		return store.ResumeStart{}, fmt.Errorf("begin resume of run %s: %w", runID, err)
	}
	return rs, nil
}

func (s *Store) beginResume(ctx context.Context, runID string, r store.ResumeBegin) (store.ResumeStart, error) {
	return s.beginResumeWith(ctx, runID, r, nil)
}

// beginResumeWith is beginResume with the commands that also adds to its
// pipeline (the one that claims the run), which it sends even when it
// takes no claim.
func (s *Store) beginResumeWith(ctx context.Context, runID string, r store.ResumeBegin, also func(redis.Pipeliner)) (store.ResumeStart, error) {
	conversation, lease, owner, ttl, start, kinds := r.Conversation, r.Lease, r.Owner, r.TTL, r.Start, r.Kinds
	if ttl < time.Millisecond {
		return store.ResumeStart{}, fmt.Errorf("ttl %v is under 1ms", ttl)
	}
	keys := []string{s.runKey(runID), s.claimKey(runID)}
	if !s.cluster {
		keys = append(keys, s.convKey(conversation))
		if lease != "" {
			keys = append(keys, s.leaseKey(lease))
		}
	} else if lease != "" {
		ok, err := s.AcquireLease(ctx, lease, owner, ttl)
		if err != nil {
			return store.ResumeStart{}, err
		}
		if !ok {
			// Busy only if there is a resume to wait for: a finished or
			// unknown run is answered as the single node's script does.
			r, finished, found, rerr := s.runRecord(ctx, runID)
			switch {
			case rerr != nil:
				return store.ResumeStart{}, rerr
			case !found:
				return store.ResumeStart{}, store.ErrNotFound
			case finished:
				r.Finished = true
				return store.ResumeStart{Run: r}, nil
			}
			return store.ResumeStart{Busy: true}, nil
		}
	}
	var res *redis.Cmd
	var conv *redis.MapStringStringCmd
	recs := make([]*redis.MapStringStringCmd, len(kinds))
	// Each command's error is checked apart: records that cannot be
	// read are left out, the rest stands.
	_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		// Eval, not Run: a pipeline cannot fall back from EVALSHA.
		again := "0"
		if r.Again {
			again = "1"
		}
		args := []any{owner, ttl.Milliseconds(), runID, r.Nonce, again}
		for _, k := range start {
			args = append(args, k)
		}
		res = beginResume.Eval(ctx, p, keys, args...)
		if s.cluster {
			conv = p.HGetAll(ctx, s.convKey(conversation))
		}
		for i, k := range kinds {
			recs[i] = p.HGetAll(ctx, s.recordsKey(k))
		}
		if also != nil {
			also(p)
		}
		return nil
	})
	var rs store.ResumeStart
	vals, err := res.Slice()
	if err == nil && conv != nil {
		err = conv.Err()
	}
	if err == nil {
		var fields map[string]string
		if conv != nil {
			fields = conv.Val()
		}
		rs, err = decodeResume(conversation, vals, fields)
	}
	if err == nil && rs.Claimed {
		rs.Records = records(kinds, recs)
	}
	if s.cluster && lease != "" && (err == nil && !rs.Claimed || err != nil && (r.Nonce == "" || errors.Is(err, store.ErrNotFound))) {
		// Kept on an error when the attempt can be asked again (it may
		// hold the claim): the lease then lapses, or is the retry's. An
		// unknown run has no claim to hold.
		err = errors.Join(err, s.ReleaseLease(ctx, lease, owner))
	}
	if err != nil {
		return store.ResumeStart{}, err
	}
	return rs, nil
}

// GetCallWith is GetCall and RecordsOf in one pipeline (one round trip),
// with the records' version read before them on a single node.
func (s *Store) GetCallWith(ctx context.Context, callID string, kinds ...string) (store.Call, map[string][]store.Record, int64, error) {
	if store.RunOf(callID) == "" {
		return store.Call{}, nil, 0, fmt.Errorf("get call %s: %w", callID, store.ErrNotFound)
	}
	var call *redis.SliceCmd
	var version *redis.StringCmd
	recs := make([]*redis.MapStringStringCmd, len(kinds))
	// Each command's error is checked apart: records that cannot be read
	// are left out, the call stands.
	_, _ = s.c.Pipelined(ctx, func(p redis.Pipeliner) error {
		if !s.cluster {
			// Before the records: a change between the two reads makes
			// the version older than the records, never newer.
			version = p.Get(ctx, s.recordsVersionKey())
		}
		call = p.HMGet(ctx, s.callKey(callID), callFields...)
		for i, k := range kinds {
			recs[i] = p.HGetAll(ctx, s.recordsKey(k))
		}
		return nil
	})
	vals, err := call.Result()
	if err != nil {
		return store.Call{}, nil, 0, fmt.Errorf("get call %s: %w", callID, err)
	}
	c, ok, err := decodeCall(vals)
	if err != nil {
		return store.Call{}, nil, 0, fmt.Errorf("get call %s: %w", callID, err)
	}
	if !ok {
		return store.Call{}, nil, 0, fmt.Errorf("get call %s: %w", callID, store.ErrNotFound)
	}
	listed := records(kinds, recs)
	if listed == nil && len(kinds) > 0 {
		return c, nil, 0, nil
	}
	return c, listed, recordsVersion(version, recs), nil
}

// records decodes the listings of kinds; nil if there are none, or if one
// of them failed or cannot be decoded.
func records(kinds []string, cmds []*redis.MapStringStringCmd) map[string][]store.Record {
	if len(kinds) == 0 {
		return nil
	}
	out := make(map[string][]store.Record, len(kinds))
	for i, k := range kinds {
		m, err := cmds[i].Result()
		if err != nil {
			return nil
		}
		if out[k], err = decodeRecords(k, m); err != nil {
			return nil
		}
	}
	return out
}

// decodeResume reads the reply of the beginResume script, with the
// conversation's fields from it or, when they were read apart, from conv.
func decodeResume(conversation string, res []any, conv map[string]string) (store.ResumeStart, error) {
	code, _ := res[0].(string)
	if code == "notfound" {
		return store.ResumeStart{}, store.ErrNotFound
	}
	if len(res) < 3 {
		return store.ResumeStart{}, fmt.Errorf("unexpected script reply %v", res)
	}
	var rs store.ResumeStart
	raw, _ := res[1].(string)
	if err := fastjson.Unmarshal([]byte(raw), &rs.Run); err != nil {
		return store.ResumeStart{}, fmt.Errorf("decode run: %w", err)
	}
	fin, _ := res[2].(string)
	rs.Run.Finished = fin == "1"
	switch code {
	case "busy":
		rs.Busy = true
		return rs, nil
	case "idle":
		return rs, nil
	case "claimed":
	default:
		return store.ResumeStart{}, fmt.Errorf("unexpected script reply %q", code)
	}
	if len(res) < 6 {
		return store.ResumeStart{}, fmt.Errorf("unexpected script reply %v", res)
	}
	rs.Claimed = true
	rs.Started, _ = res[5].(string)
	if len(res) >= 8 {
		rs.PriorNonce, _ = res[6].(string)
		rs.PriorStarted, _ = res[7].(string)
	}
	calls, _ := res[3].([]any)
	for i, v := range calls {
		f, _ := v.([]any)
		c, ok, err := decodeCall(f)
		if err != nil {
			return store.ResumeStart{}, fmt.Errorf("call %d: %w", i, err)
		}
		if ok {
			rs.Calls = append(rs.Calls, c)
		}
	}
	if len(rs.Calls) != len(rs.Run.CallIDs) {
		return store.ResumeStart{}, fmt.Errorf("run has %d calls, found %d: %w", len(rs.Run.CallIDs), len(rs.Calls), store.ErrNotFound)
	}
	for i, c := range rs.Calls {
		if c.ID != rs.Run.CallIDs[i] {
			return store.ResumeStart{}, fmt.Errorf("call %d is %s, want %s", i, c.ID, rs.Run.CallIDs[i])
		}
	}
	if conv == nil {
		flat, _ := res[4].([]any)
		conv = make(map[string]string, len(flat)/2)
		for i := 0; i+1 < len(flat); i += 2 {
			k, _ := flat[i].(string)
			conv[k], _ = flat[i+1].(string)
		}
	}
	if len(conv) == 0 {
		return rs, nil
	}
	c, err := decodeConversation(conversation, conv)
	if err != nil {
		return store.ResumeStart{}, fmt.Errorf("decode conversation %s: %w", conversation, err)
	}
	rs.Conversation, rs.Found = c, true
	return rs, nil
}
