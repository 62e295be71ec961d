package telemetry_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/toolgate/toolgate/internal/fakeopenai"
	"github.com/toolgate/toolgate/internal/redact"
	"github.com/toolgate/toolgate/telemetry"
)

// A secret with a backslash or a double quote (a generated Redis
// password) is hidden in captured content that is JSON (the model's tool
// arguments, the messages), where it is written escaped, as in the logs.
func TestCapturedJSONContentHidesEscapedSecrets(t *testing.T) {
	const secret = `Pa55\w0rd"Redis`
	red := redact.New(secret)
	w := newWorld(t, true, telemetry.WithRedaction(red.String))
	esc, _ := json.Marshal(secret)
	inner := strings.Trim(string(esc), `"`) // Pa55\\w0rd\"Redis
	w.model.Reply(
		fakeopenai.ToolCalls(fakeopenai.ToolCall{ID: "c1", Name: "read_file", Arguments: `{"path":"` + inner + `"}`}),
		fakeopenai.Text("done"),
	)
	req := request
	req.Text = "the redis password is " + secret
	if _, err := w.agent.Run(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	for _, l := range leaks(w.spans.GetSpans(), inner) {
		t.Errorf("exported the secret JSON-escaped: %s", l)
	}
	for _, l := range leaks(w.spans.GetSpans(), "w0rd") {
		t.Errorf("exported the secret in some form: %s", l)
	}
}
