package slackapp_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/fakeslack"
)

// policy test of ask_human under a rule that allows it says it asks, as a
// real call of the model does: a question for people cannot be answered
// by running it.
func TestPolicyTestOfAQuestionToolAsksAsARealCall(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.AdminUsers = []string{other}
	e.start()
	wantIn(t, "policy add", e.slash(other, "policy add tool=ask_human verdict=allow id=qa"), "Added runtime rule `qa`")
	test := e.slash(requester, `policy test ask_human {"question":"ok?"}`)

	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "ask_human", `{"question":"ok?"}`)), fakeopenai.Text("Thanks."))
	ts := e.slack.Mention(channel, requester, "ask me")
	// The real call pauses: its question is posted, and waits on an answer.
	e.waitThread(ts, "the question", func(m fakeslack.Message) bool { return strings.Contains(m.Text+blocksText(m), "Question from") })

	if !strings.Contains(test, "*ask*") {
		t.Errorf("policy test says the call is not asked, but the real call asks:\n%s", test)
	}
}

// policy add echoes the rule before its notes, clipped: a long rule (a
// `when` listing the services it allows) leaves room for the "Careful"
// warning that the new rule loosens an older stricter one.
func TestPolicyAddKeepsItsWarningsForALongRule(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	e.cfg.AdminUsers = []string{other}
	e.start()
	wantIn(t, "policy add of a deny", e.slash(other, "policy add tool=deploy verdict=deny id=freeze reason=frozen"), "Added runtime rule `freeze`")
	var svcs []string
	for i := range 250 {
		svcs = append(svcs, fmt.Sprintf(`"service-%03d"`, i))
	}
	got := e.slash(other, "policy add tool=deploy verdict=allow id=some when='args.service in ["+strings.Join(svcs, ",")+"]'")
	wantIn(t, "policy add of a looser rule", got, "Added runtime rule `some`", "Careful", "/approvals policy remove some")
}
