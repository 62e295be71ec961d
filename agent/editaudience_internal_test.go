package agent

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/toolgate/toolgate/store"
)

// An edit stored before it was recorded whether its rule names no
// approvers needs what the card's rule needs; one stored with the mark
// needs the conversation's audience whatever the card's rule names.
func TestViewOfAnEditStoredWithoutTheAudienceMark(t *testing.T) {
	const stored = `{"id":"r.0","run_id":"r","tool":"restart","args":{"env":"staging"},"status":"pending",
		"approvers":["UONE000001","UTWO000002"],"min_approvals":2,
		"edit":{"kind":"edit","decider":"UONE000001","args":{"env":"prod"},"min_approvals":2%s}}`
	for _, tc := range []struct {
		mark string
		want bool
	}{
		{mark: "", want: false},
		{mark: `,"needs_audience":true`, want: true},
	} {
		var c store.Call
		if err := json.Unmarshal([]byte(fmt.Sprintf(stored, tc.mark)), &c); err != nil {
			t.Fatal(err)
		}
		v := viewOf(c)
		if !v.Edited || v.NeedsAudience != tc.want || len(v.Approvers) != 2 {
			t.Errorf("an edit stored with %q: edited %v, NeedsAudience %v, approvers %v; want edited, %v, the card's two", tc.mark, v.Edited, v.NeedsAudience, v.Approvers, tc.want)
		}
	}
}
