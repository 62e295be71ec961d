package slackapp_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/tools"
)

// A workspace write's card shows the unified diff of the file against the
// new content, computed when the call paused; the file is untouched until
// the approval.
func TestPreviewDiffOnCard(t *testing.T) {
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			e := newEnv(t, kind)
			root := t.TempDir()
			must(t, os.WriteFile(filepath.Join(root, "app.conf"), []byte("replicas: 2\nimage: api:4\n"), 0o644))
			ws, err := tools.WorkspaceTools(tools.WorkspaceConfig{Root: root})
			must(t, err)
			for _, tool := range ws {
				must(t, e.reg.Register(tool))
			}
			e.start()
			e.model.Reply(fakeopenai.ToolCalls(tc("c1", "workspace_write", `{"path":"app.conf","content":"replicas: 3\nimage: api:4\n"}`)), fakeopenai.Text("Written."))
			ts := e.slack.Mention(channel, requester, "scale to 3")
			card := e.card(ts, "workspace_write")
			text := blocksText(card)
			for _, want := range []string{"*Preview*", "--- a/app.conf", "+++ b/app.conf", `-replicas: 2`, `+replicas: 3`} {
				if !strings.Contains(text, want) {
					t.Errorf("the card lacks %q: %s", want, text)
				}
			}
			if got, _ := os.ReadFile(filepath.Join(root, "app.conf")); string(got) != "replicas: 2\nimage: api:4\n" {
				t.Errorf("the file changed before the approval: %q", got)
			}
			_, err = e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
			must(t, err)
			e.answer(ts, "Written.")
			if got, _ := os.ReadFile(filepath.Join(root, "app.conf")); string(got) != "replicas: 3\nimage: api:4\n" {
				t.Errorf("after the approval the file is %q", got)
			}
		})
	}
}

// A preview that fails shows as unavailable without holding the card back,
// and the call is decided and runs as usual.
func TestPreviewFailureShownOnCard(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	ran := make(chan struct{}, 1)
	must(t, e.reg.Register(agent.Tool{Name: "rotate_keys", Schema: json.RawMessage(`{"type":"object"}`),
		Handler: func(context.Context, json.RawMessage) (agent.Result, error) {
			ran <- struct{}{}
			return agent.Result{Content: "rotated"}, nil
		},
		Preview: func(context.Context, json.RawMessage) (string, error) {
			return "", errors.New("the key service <is down>")
		}}))
	e.start()
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "rotate_keys", `{}`)), fakeopenai.Text("Rotated."))
	ts := e.slack.Mention(channel, requester, "rotate")
	card := e.card(ts, "rotate_keys")
	if text := blocksText(card); !strings.Contains(text, "Preview unavailable: `the key service &lt;is down&gt;`") {
		t.Errorf("the card does not say the preview is unavailable (escaped): %s", text)
	}
	_, err := e.slack.Click(approver, channel, card.TS, slackapp.ActionApprove, "")
	must(t, err)
	e.answer(ts, "Rotated.")
	select {
	case <-ran:
	default:
		t.Error("the call did not run after the approval")
	}
}

// A preview too long for the card is cut there, and View full preview
// opens all of it in a modal.
func TestPreviewViewFull(t *testing.T) {
	e := newEnv(t, storeKinds(t)[0])
	root := t.TempDir()
	ws, err := tools.WorkspaceTools(tools.WorkspaceConfig{Root: root})
	must(t, err)
	for _, tool := range ws {
		must(t, e.reg.Register(tool))
	}
	e.start()
	var content strings.Builder
	for i := range 300 {
		fmt.Fprintf(&content, "line %d of the generated file\n", i)
	}
	args, _ := json.Marshal(map[string]string{"path": "gen.txt", "content": content.String()})
	e.model.Reply(fakeopenai.ToolCalls(tc("c1", "workspace_write", string(args))))
	ts := e.slack.Mention(channel, requester, "generate")
	card := e.card(ts, "workspace_write")
	if text := blocksText(card); !strings.Contains(text, "new file gen.txt, 300 lines") {
		t.Fatalf("the card lacks the new-file preview: %s", text)
	}

	// A diff too long for the card: change every line of the file.
	must(t, os.WriteFile(filepath.Join(root, "gen.txt"), []byte(strings.ReplaceAll(content.String(), "line", "LINE")), 0o644))
	e.model.Reply(fakeopenai.ToolCalls(tc("c2", "workspace_write", string(args))))
	ts2 := e.slack.Mention(channel, requester, "generate again")
	card2 := e.card(ts2, "workspace_write")
	if !strings.Contains(string(card2.Blocks), slackapp.ActionViewPreview) {
		t.Fatalf("a long diff has no View full preview button: %s", card2.Blocks)
	}
	_, err = e.slack.Click(stranger, channel, card2.TS, slackapp.ActionViewPreview, "")
	must(t, err)
	m := e.modal(stranger, slackapp.CallbackViewPreview)
	if raw := string(m.JSON); !strings.Contains(raw, "+line 299 of the generated file") || !strings.Contains(raw, "-LINE 0 of the generated file") {
		t.Errorf("the full-preview modal does not hold the whole diff: %.500s", raw)
	}
}
