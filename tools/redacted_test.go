package tools

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// An HTTP MCP server whose tool, and whose preview tool, fail quoting the
// X-Api-Key header the bot sent them (a common "invalid key" answer): the
// key, from ${VAR}, reaches neither the model nor the card's preview.
func TestMCPToolErrorQuotingAConfiguredSecretIsRedacted(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "leaky", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "act", Description: "Act."},
		func(_ context.Context, req *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("upstream refused key " + req.Extra.Header.Get("X-Api-Key"))
		})
	mcp.AddTool(s, &mcp.Tool{Name: "act_preview", Description: "Preview act.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}},
		func(_ context.Context, req *mcp.CallToolRequest, in idIn) (*mcp.CallToolResult, any, error) {
			return nil, nil, errors.New("preview: key " + req.Extra.Header.Get("X-Api-Key") + " has no access")
		})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{Handler: h}
	go hs.Serve(ln)
	t.Cleanup(func() { hs.Close() })
	t.Setenv("TOOLGATE_TEST_KEY", "sk-live-configured")
	reg, _ := loadYAML(t, fmt.Sprintf(`
mcp_servers:
  - name: leaky
    url: http://%s/mcp
    headers: {X-Api-Key: "${TOOLGATE_TEST_KEY}"}
    preview: {act: act_preview}
`, ln.Addr()), testOptions())
	res := call(t, reg, "leaky__act", `{"id":"x"}`)
	if strings.Contains(res.Content, "sk-live-configured") || !strings.Contains(res.Content, "upstream refused key [redacted]") {
		t.Errorf("the model is given %q, want the key redacted", res.Content)
	}
	tool, _ := reg.Lookup("leaky__act")
	if tool.Preview == nil {
		t.Fatal("no preview")
	}
	_, perr := tool.Preview(t.Context(), json.RawMessage(`{"id":"x"}`))
	if perr == nil || strings.Contains(perr.Error(), "sk-live-configured") {
		t.Errorf("the preview's error, shown on the card, is %v; want an error with the key redacted", perr)
	}
}

// run_command's env from ${VAR} does not reach the model when a program
// prints it, whole or cut short by max_output_bytes.
func TestRunCommandOutputOfAConfiguredSecretIsRedacted(t *testing.T) {
	t.Setenv("TOOLGATE_TEST_TOKEN", "tok-configured-secret-value")
	for _, tt := range []struct {
		name, limit string
	}{{"whole", ""}, {"cut short", "    max_output_bytes: 12\n"}} {
		t.Run(tt.name, func(t *testing.T) {
			reg, _ := loadYAML(t, `
builtin_tools:
  run_command:
    dir: `+t.TempDir()+`
    allow: ["printenv"]
    env: {API_TOKEN: "${TOOLGATE_TEST_TOKEN}"}
`+tt.limit, testOptions())
			res := call(t, reg, "run_command", `{"argv":["printenv","API_TOKEN"]}`)
			if strings.Contains(res.Content, "tok-configu") || !strings.Contains(res.Content, "[redacted]") {
				t.Errorf("run_command's result gives the model %q, want the secret redacted", res.Content)
			}
		})
	}
}

// A value from ${VAR} that says where a program is or runs (an MCP
// server's command arguments and dir) is not a credential: the tools'
// output, which names paths, keeps it (it is still kept out of the logs).
func TestPathFromAVariableIsNotRedactedFromToolOutput(t *testing.T) {
	root := t.TempDir()
	t.Setenv("TOOLGATE_TEST_ROOT", root)
	reg, _ := loadYAML(t, `
mcp_servers:
  - name: files
    command: ["/nonexistent/files-mcp", "--root", "${TOOLGATE_TEST_ROOT}"]
    dir: "${TOOLGATE_TEST_ROOT}"
builtin_tools:
  run_command:
    dir: `+root+`
    allow: ["pwd"]
`, testOptions())
	res := call(t, reg, "run_command", `{"argv":["pwd"]}`)
	if !strings.Contains(res.Content, root) || strings.Contains(res.Content, "[redacted]") {
		t.Errorf("run_command pwd gives the model %q, want the directory %s", res.Content, root)
	}
}
