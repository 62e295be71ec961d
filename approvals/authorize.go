package approvals

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Approvable is what Authorize needs to know about a paused call: who may
// decide it and who asked for it.
type Approvable struct {
	// Approvers are Slack user ids (U…, W…) and user-group ids (S…); empty
	// means anyone.
	Approvers []string
	// FourEyes forbids the requester from deciding.
	FourEyes bool
	// Requester is the Slack user id of whoever started the turn.
	Requester string
	// Requesters are everyone whose message the turn answers; four eyes
	// forbids each of them, as it does Requester.
	Requesters []string
}

// GroupResolver lists the members of a Slack user group (usergroups.users.list).
type GroupResolver interface {
	Members(ctx context.Context, groupID string) ([]string, error)
}

// Authorize reports whether decider may decide the call c. It returns nil
// when the decider is allowed, and otherwise an error wrapping
// ErrNotApprover that says why: the decider is a requester (Requester or
// one of Requesters) of a four-eyes call, or is neither listed nor a member
// of a listed user group. With no
// approvers anyone may decide (subject to four eyes). Listed user ids are
// checked before any group is looked up; a group lookup that fails refuses
// the decider (fail closed) unless another listed group admits them, and the
// lookup error is wrapped too. A nil groups refuses anyone who is not listed
// by user id.
func Authorize(ctx context.Context, c Approvable, decider string, groups GroupResolver) error {
	if decider == "" {
		return fmt.Errorf("no decider given: %w", ErrNotApprover)
	}
	if c.FourEyes && (decider == c.Requester || slices.Contains(c.Requesters, decider)) {
		return fmt.Errorf("%s asked for this call and it needs a second person: %w", decider, ErrNotApprover)
	}
	if len(c.Approvers) == 0 {
		return nil
	}
	var groupIDs []string
	for _, a := range c.Approvers {
		if a == decider {
			return nil
		}
		if IsGroup(a) {
			groupIDs = append(groupIDs, a)
		}
	}
	var lookupErrs []error
	for _, g := range groupIDs {
		if groups == nil {
			lookupErrs = append(lookupErrs, fmt.Errorf("user group %s: no group lookup configured", g))
			continue
		}
		members, err := groups.Members(ctx, g)
		if err != nil {
			lookupErrs = append(lookupErrs, fmt.Errorf("user group %s: %w", g, err))
			continue
		}
		for _, m := range members {
			if m == decider {
				return nil
			}
		}
	}
	who := strings.Join(c.Approvers, ", ")
	if len(lookupErrs) > 0 {
		return fmt.Errorf("%w (%w): %s is not listed among %s and group membership could not be checked: %w",
			ErrNotApprover, ErrUnverified, decider, who, errors.Join(lookupErrs...))
	}
	return fmt.Errorf("%s is not among the approvers %s: %w", decider, who, ErrNotApprover)
}
