package botsetup

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/approvals"
	"github.com/toolgate/toolgate/tools"
)

// warnPolicy logs a warning for each mistake of the policy file that does
// not stop the bot but makes a rule do nothing: a rule no call reaches
// (see approvals.Policy.Unreached), an ask whose calls expire before their
// approvers are reminded (Unreminded, by d, the bot's defaults), and a
// rule whose tool glob matches none of the tools the bot has (see
// UnmatchedRules). An operator who never runs bot policy check learns of
// them from the start's log instead of from a call that was never judged
// as meant.
func warnPolicy(log *slog.Logger, p *approvals.Policy, d approvals.Defaults, servers []tools.ServerConfig, status []tools.ServerStatus, reg *agent.Registry) {
	for _, n := range append(p.Unreached(), p.Unreminded(d)...) {
		log.Warn("policy note", "note", n)
	}
	// The caller took status before the tools are read here: a server it
	// says has listed its tools has them in the registry already.
	var names []string
	for _, t := range reg.List() {
		names = append(names, t.Name)
	}
	for _, u := range UnmatchedRules(p.Rules(), servers, status, names) {
		log.Warn("policy rule matches no tool", "rule", u.Rule.ID, "tool", u.Rule.Tool, "why", u.Why)
	}
}

// UnmatchedRule is a rule whose tool glob matches none of the bot's
// tools, and why.
type UnmatchedRule struct {
	Rule approvals.Rule
	Why  string
}

// UnmatchedRules returns the rules whose tool glob matches none of names,
// the tools the bot has, of those it can judge by the servers' status
// (none listed when status is empty, as for a check made offline). An MCP server that
// has not listed its tools (down at start, and retried in the background)
// may have one that a rule matches, so a rule is judged only when every
// server whose tools it may match has listed them: a rule for
// server__… by that server alone, a name without "__" (a built-in's) at
// once, and any other glob once every server has.
func UnmatchedRules(rules []approvals.Rule, servers []tools.ServerConfig, status []tools.ServerStatus, names []string) []UnmatchedRule {
	configured := make([]string, len(servers))
	for i, s := range servers {
		configured[i] = s.Name
	}
	// A server that is connected has listed its tools, and one that has
	// tools in the registry listed them before it went down; one with
	// neither may list them later.
	var listed []string
	for _, st := range status {
		if st.Connected || st.Tools > 0 {
			listed = append(listed, st.Name)
		}
	}
	var out []UnmatchedRule
	for _, r := range rules {
		if !approvals.MatchesNone(r.Tool, names) {
			continue
		}
		var why string
		server, _, mcp := strings.Cut(r.Tool, "__")
		switch {
		case mcp && !hasMeta(server) && !slices.Contains(configured, server):
			why = fmt.Sprintf("there is no MCP server %q in mcp_servers", server)
		case mcp && !hasMeta(server) && slices.Contains(listed, server):
			why = fmt.Sprintf("MCP server %s lists no tool it matches", server)
		case mcp && !hasMeta(server):
			continue // its server has not listed its tools yet
		case !hasMeta(r.Tool):
			why = "builtin_tools enables no tool of that name (MCP tools are named server__tool)"
		case len(listed) == len(servers):
			why = fmt.Sprintf("none of the %d tools of the built-ins and the MCP servers matches it", len(names))
		default:
			continue // a server that has not listed its tools may have one
		}
		out = append(out, UnmatchedRule{Rule: r, Why: why})
	}
	return out
}

// hasMeta reports whether a glob has pattern characters.
func hasMeta(glob string) bool { return strings.ContainsAny(glob, `*?[\`) }
