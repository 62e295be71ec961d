package approvals

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// groups is a GroupResolver over a fixed map; a group mapped to nil fails.
type groups map[string][]string

var errLookup = errors.New("slack unavailable")

func (g groups) Members(_ context.Context, id string) ([]string, error) {
	m, ok := g[id]
	if !ok || m == nil {
		return nil, errLookup
	}
	return m, nil
}

func TestAuthorize(t *testing.T) {
	ctx := context.Background()
	g := groups{"S1OPS": {"U2", "U3"}, "S2SEC": {"U4"}, "SDOWN": nil}
	tests := []struct {
		name      string
		c         Approvable
		decider   string
		groups    GroupResolver
		wantErr   bool
		wantCause error // also wrapped, when set
		wantMsg   string
	}{
		{"anyone when no approvers", Approvable{Requester: "U9"}, "U1", g, false, nil, ""},
		{"requester without four eyes", Approvable{Requester: "U1"}, "U1", g, false, nil, ""},
		{"four eyes refuses requester", Approvable{Requester: "U1", FourEyes: true}, "U1", g, true, nil, "needs a second person"},
		{"four eyes allows another", Approvable{Requester: "U1", FourEyes: true}, "U2", g, false, nil, ""},
		{"listed user", Approvable{Approvers: []string{"U1", "S1OPS"}}, "U1", g, false, nil, ""},
		{"listed user who is requester, four eyes", Approvable{Approvers: []string{"U1"}, Requester: "U1", FourEyes: true}, "U1", g, true, nil, "second person"},
		{"group member", Approvable{Approvers: []string{"U1", "S1OPS"}}, "U3", g, false, nil, ""},
		{"second group member", Approvable{Approvers: []string{"S1OPS", "S2SEC"}}, "U4", g, false, nil, ""},
		{"not listed", Approvable{Approvers: []string{"U1", "S1OPS"}}, "U7", g, true, nil, "U7 is not among the approvers U1, S1OPS"},
		{"workspace user id", Approvable{Approvers: []string{"W1"}}, "W1", g, false, nil, ""},
		{"lookup error fails closed", Approvable{Approvers: []string{"SDOWN"}}, "U2", g, true, errLookup, "could not be checked"},
		{"lookup error, member of another group", Approvable{Approvers: []string{"SDOWN", "S1OPS"}}, "U2", g, false, nil, ""},
		{"listed user skips lookups", Approvable{Approvers: []string{"SDOWN", "U5"}}, "U5", g, false, nil, ""},
		{"no resolver", Approvable{Approvers: []string{"S1OPS"}}, "U2", nil, true, nil, "no group lookup configured"},
		{"empty decider", Approvable{}, "", g, true, nil, "no decider"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Authorize(ctx, tt.c, tt.decider, tt.groups)
			if !tt.wantErr {
				if err != nil {
					t.Errorf("Authorize(%+v, %q): got %v, want nil", tt.c, tt.decider, err)
				}
				return
			}
			if !errors.Is(err, ErrNotApprover) {
				t.Fatalf("Authorize(%+v, %q): got %v, want an error wrapping ErrNotApprover", tt.c, tt.decider, err)
			}
			if tt.wantCause != nil && !errors.Is(err, tt.wantCause) {
				t.Errorf("Authorize(%+v, %q): got %v, want it to wrap %v", tt.c, tt.decider, err, tt.wantCause)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("Authorize(%+v, %q): got %q, want it to contain %q", tt.c, tt.decider, err, tt.wantMsg)
			}
		})
	}
}

// Four eyes forbids every requester of a call, and still the one Requester
// of calls stored before Requesters were recorded.
func TestAuthorizeFourEyesEveryRequester(t *testing.T) {
	ctx := context.Background()
	c := Approvable{FourEyes: true, Requester: "U2", Requesters: []string{"U1", "U2"}}
	for _, tt := range []struct {
		c       Approvable
		decider string
		ok      bool
	}{
		{c, "U1", false},
		{c, "U2", false},
		{c, "U3", true},
		{Approvable{FourEyes: true, Requester: "U2"}, "U2", false},
		{Approvable{FourEyes: true, Requester: "U2"}, "U1", true},
		{Approvable{Requester: "U2", Requesters: []string{"U1", "U2"}}, "U1", true},
	} {
		err := Authorize(ctx, tt.c, tt.decider, nil)
		if (err == nil) != tt.ok || (err != nil && !errors.Is(err, ErrNotApprover)) {
			t.Errorf("Authorize(%+v, %s) = %v, want allowed %v", tt.c, tt.decider, err, tt.ok)
		}
	}
}
