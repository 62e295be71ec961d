package botsetup

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/internal/fakeslack"
	"github.com/toolgate/toolgate/slackapp"
	"github.com/toolgate/toolgate/tools"
)

// A built bot warns of each rule of its policy file that does nothing: one
// no call reaches, an ask that expires before its first reminder (by the
// bot's REMINDER_AFTER), and one whose tool glob matches none of its
// tools. A rule an MCP server down at start may yet match is not judged;
// once the server is up at a start, it is.
func TestBuildWarnsOfPolicyNotes(t *testing.T) {
	gh := newLateServer(t, 2) // gh__tool_0, gh__tool_1
	gh.up.Store(true)
	down := newLateServer(t, 1) // down__tool_0, once it is up
	file, err := LoadFile("CONFIG_FILE", writeFile(t, t.TempDir(), "config.yaml", `mcp_servers:
  - name: gh
    url: `+gh.url+`
  - name: down
    url: `+down.url+`
builtin_tools:
  ask_human: {}
policy:
  rules:
    - {id: gh-tools, tool: "gh__tool_*", verdict: allow}
    - {id: shadowed, tool: gh__tool_0, verdict: ask}
    - {id: gh-typo, tool: "gh__merge_*", verdict: ask}
    - {id: down-deploy, tool: down__deploy, verdict: ask}
    - {id: no-server, tool: "gihub__merge_*", verdict: ask}
    - {id: builtin-typo, tool: ask_humna, verdict: allow}
    - {id: deletes, tool: "*_delete", verdict: deny}
    - {id: short, tool: ask_human, verdict: ask, ttl: 30m}
`))
	if err != nil {
		t.Fatal(err)
	}
	build := func() []string {
		t.Helper()
		logs := &logLines{}
		bot, err := buildLogging(t, logs, Parts{File: file, Agent: agent.Config{ApprovalTTL: 72 * time.Hour, ReminderAfter: time.Hour}})
		if err != nil {
			t.Fatalf("Build: %v", err)
		}
		defer bot.Close()
		var got []string
		for _, l := range logs.with(t, "policy ") {
			if l["level"] != "WARN" {
				t.Errorf("logged %v, want a warning", l)
			}
			if l["msg"] == "policy note" {
				got = append(got, fmt.Sprint(l["note"]))
			} else {
				got = append(got, fmt.Sprintf("%s: rule %v (tool %v): %v", l["msg"], l["rule"], l["tool"], l["why"]))
			}
		}
		return got
	}
	notes := []string{
		"rule shadowed (tool gh__tool_0) is never reached: rule gh-tools (tool gh__tool_*, no condition) comes first and matches every call it would",
		"rule short (tool ask_human) never reminds its approvers: its calls expire after 30m (its ttl), no later than the first reminder would come, after 1h (REMINDER_AFTER); give it a remind_after shorter than the ttl",
		`policy rule matches no tool: rule gh-typo (tool gh__merge_*): MCP server gh lists no tool it matches`,
	}
	want := append(slices.Clone(notes),
		`policy rule matches no tool: rule no-server (tool gihub__merge_*): there is no MCP server "gihub" in mcp_servers`,
		`policy rule matches no tool: rule builtin-typo (tool ask_humna): builtin_tools enables no tool of that name (MCP tools are named server__tool)`,
	)
	if got := build(); !slices.Equal(got, want) {
		t.Errorf("with MCP server down not connected, the warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Up at the start, the server has listed its tools: its rule, and a
	// glob any server's tool may match, are judged.
	down.up.Store(true)
	want = append(slices.Clone(notes),
		`policy rule matches no tool: rule down-deploy (tool down__deploy): MCP server down lists no tool it matches`,
		`policy rule matches no tool: rule no-server (tool gihub__merge_*): there is no MCP server "gihub" in mcp_servers`,
		`policy rule matches no tool: rule builtin-typo (tool ask_humna): builtin_tools enables no tool of that name (MCP tools are named server__tool)`,
		`policy rule matches no tool: rule deletes (tool *_delete): none of the 4 tools of the built-ins and the MCP servers matches it`,
	)
	if got := build(); !slices.Equal(got, want) {
		t.Errorf("with every MCP server connected, the warnings:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// buildLogging builds a bot of p's File, Agent and tool limit, logging as
// JSON lines into logs, on a fresh embedded store, against a fake Slack
// and a model at an address nothing answers. The store is closed at the
// end of the test; the caller closes the bot.
func buildLogging(t *testing.T, logs *logLines, p Parts) (*Bot, error) {
	t.Helper()
	log := slog.New(slog.NewJSONHandler(logs, nil))
	st, err := OpenStore(t.Context(), StoreConfig{Dir: t.TempDir()}, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	slack := fakeslack.New(t)
	p.Store, p.Logger, p.Metrics = st, log, slackapp.NewMetrics(prometheus.NewRegistry())
	p.Model = agent.NewOpenAIModel(agent.ModelConfig{BaseURL: "http://127.0.0.1:1/v1", APIKey: "k", Model: "m", Timeout: time.Second})
	p.Slack = slackapp.Config{BotToken: slack.BotToken(), AppToken: slack.AppToken(), APIURL: slack.APIURL(), ShutdownGrace: time.Second}
	return Build(t.Context(), p)
}

// UnknownArgs judges a rule only when every tool it may match is known,
// and notes an argument only when no tool it matches may take it.
func TestUnknownArgs(t *testing.T) {
	closed := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"additionalProperties":false}`)
	open := json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}}}`)
	schemas := map[string]json.RawMessage{"workspace_read": closed, "gh__merge": closed, "gh__comment": open}
	servers := []tools.ServerConfig{{Name: "gh"}, {Name: "down"}}
	status := []tools.ServerStatus{{Name: "gh", Connected: true}, {Name: "down"}}
	rules := []approvals.Rule{
		{ID: "typo", Tool: "workspace_read", When: "has(args.pth)"},
		{ID: "fine", Tool: "workspace_read", When: `args.path == "x"`},
		{ID: "gh-typo", Tool: "gh__merge", When: "args.brnch == 'main'"},
		{ID: "gh-open", Tool: "gh__*", When: "args.body == 'x'"},           // gh__comment may take it
		{ID: "down-unknown", Tool: "down__deploy", When: "args.x == 1"},    // down has not listed its tools
		{ID: "any-unknown", Tool: "*_read", When: "args.pth == 'x'"},       // may match a tool of down
		{ID: "no-where", Tool: "workspace_write", When: "args.pth == 'x'"}, // matches no known tool
	}
	var got []string
	for _, u := range UnknownArgs(rules, schemas, servers, status) {
		got = append(got, u.Rule.ID+":"+u.Arg+":"+strings.Join(u.Tools, ","))
	}
	if want := []string{"typo:pth:workspace_read", "gh-typo:brnch:gh__merge"}; !slices.Equal(got, want) {
		t.Errorf("UnknownArgs = %q, want %q", got, want)
	}
}
