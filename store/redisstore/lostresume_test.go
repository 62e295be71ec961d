package redisstore_test

import (
	"context"
	"crypto/sha1"
	"fmt"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/toolgate/toolgate/store"
	"github.com/toolgate/toolgate/store/redisstore"
)

// lostResumeReply makes, once armed, the reply of the script that begins
// a resume beside a decision lost after Redis ran it, and every later
// attempt to ask for that claim again fail unsent: a connection that
// drops for the rest of the step.
type lostResumeReply struct {
	armed         *bool
	decided, sent string
}

func (lostResumeReply) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h lostResumeReply) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if *h.armed && h.runs(h.sent)(cmd) {
			cmd.SetErr(io.EOF)
			return io.EOF
		}
		return next(ctx, cmd)
	}
}
func (h lostResumeReply) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !*h.armed {
			return next(ctx, cmds)
		}
		if i := slices.IndexFunc(cmds, h.runs(h.decided)); i >= 0 {
			err := next(ctx, cmds)
			cmds[i].SetErr(io.EOF)
			return err
		}
		if slices.ContainsFunc(cmds, h.runs(h.sent)) {
			for _, c := range cmds {
				c.SetErr(io.EOF)
			}
			return io.EOF
		}
		return next(ctx, cmds)
	}
}

// runs reports whether a command runs the script of hash sha.
func (lostResumeReply) runs(sha string) func(redis.Cmder) bool {
	return func(c redis.Cmder) bool {
		args := c.Args()
		if len(args) < 2 {
			return false
		}
		switch fmt.Sprint(args[0]) {
		case "evalsha":
			return fmt.Sprint(args[1]) == sha
		case "eval":
			return fmt.Sprintf("%x", sha1.Sum([]byte(fmt.Sprint(args[1])))) == sha
		}
		return false
	}
}

// A decision whose resume's claim was perhaps taken, its answer lost and
// not to be had again, is an error the caller recovers as a lost
// decision's (asking for the attempt's claim until the store answers),
// not a decision made with no resume begun: the claim and the call's
// mark it may have taken would otherwise be found by the next resume as a
// call started and of unknown outcome, though it never ran.
func TestDecisionWhoseResumeAnswerIsLostIsAnError(t *testing.T) {
	u := redisURL(t)
	opts, err := redis.ParseURL(u)
	if err != nil {
		skipOutsideCI(t, "the test needs a single-node REDIS_URL: %v", err)
	}
	c := redis.NewClient(opts)
	armed := false
	decided, begin := redisstore.ResumeScriptHashes()
	c.AddHook(lostResumeReply{armed: &armed, decided: decided, sent: begin})
	s := redisstore.NewFromClient(c, redisstore.Options{Prefix: newPrefix(t, u)})
	t.Cleanup(func() { _ = s.Close() })
	ctx := t.Context()
	if err := redisstore.LoadDecisionScripts(ctx, c); err != nil {
		t.Fatal(err)
	}
	conv, call := oneCall(t, s, "fp")
	armed = true
	d := store.Decision{Kind: "approve", Decider: "U2", At: time.Now(), Attempt: "a1"}
	rb := store.ResumeBegin{Conversation: conv, Lease: store.TurnLease(conv), Owner: "me#1", TTL: time.Minute, Start: []string{"approve"}, Nonce: "n1"}
	_, complete, rs, err := s.DecideBegin(ctx, call.ID, "fp", d, store.Effects{}, rb)
	armed = false
	if err == nil {
		t.Fatalf("DecideBegin with the resume's answer lost = complete %v, claimed %v, nil error; want an error", complete, rs.Claimed)
	}
	// Asked again once the store answers, the attempt's claim is there.
	rb.Again = true
	again, err := s.BeginResume(ctx, store.RunOf(call.ID), rb)
	if err != nil || !again.Claimed || again.Started != call.ID {
		t.Errorf("BeginResume asked again = claimed %v, started %q, %v; want the attempt's claim, the call marked", again.Claimed, again.Started, err)
	}
}
