package botsetup

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
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
// UnmatchedRules), and one whose condition reads an argument none of its
// tools takes (see UnknownArgs). An operator who never runs bot policy check learns of
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
	schemas := map[string]json.RawMessage{}
	for _, t := range reg.List() {
		schemas[t.Name] = t.Schema
	}
	for _, u := range UnknownArgs(p.Rules(), schemas, servers, status) {
		log.Warn("policy rule reads an argument its tools do not take", "rule", u.Rule.ID, "arg", u.Arg, "tools", strings.Join(u.Tools, ","), "why", UnknownArgText(u))
	}
}

// UnknownArgText says what an UnknownArg means.
func UnknownArgText(u UnknownArg) string {
	return fmt.Sprintf("rule %s reads args.%s, which none of the tools it matches takes (%s): its condition reads it as missing on every call (a typo?)", u.Rule.ID, u.Arg, strings.Join(u.Tools, ", "))
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
	listed := listedServers(status)
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
		case mcp && !hasMeta(server) && listed[server]:
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

// listedServers are the MCP servers, of status, that have listed their
// tools: one connected, or with tools in the registry it listed before it
// went down; one with neither may list them later.
func listedServers(status []tools.ServerStatus) map[string]bool {
	listed := map[string]bool{}
	for _, st := range status {
		if st.Connected || st.Tools > 0 {
			listed[st.Name] = true
		}
	}
	return listed
}

// hasMeta reports whether a glob has pattern characters.
func hasMeta(glob string) bool { return strings.ContainsAny(glob, `*?[\`) }

// UnknownArg is an argument a rule's condition reads by name that none of
// the tools the rule matches takes, and those tools.
type UnknownArg struct {
	Rule  approvals.Rule
	Arg   string
	Tools []string
}

// UnknownArgs returns, for each rule whose condition reads an argument by
// name (see approvals.ArgsRead), the names none of the tools it matches
// takes: their schemas (schemas, by tool name) name no such property and
// allow no other. Such a condition reads the argument as missing on every
// call, a typo most likely: a deny guarded by has(args.pth) never denies.
// A rule is judged only when every tool it may match is known, as
// UnmatchedRules judges (the servers' status says which MCP servers have
// listed their tools; none when it is empty, as offline), and when it
// matches one.
func UnknownArgs(rules []approvals.Rule, schemas map[string]json.RawMessage, servers []tools.ServerConfig, status []tools.ServerStatus) []UnknownArg {
	listed := listedServers(status)
	names := slices.Sorted(maps.Keys(schemas))
	var out []UnknownArg
	for _, r := range rules {
		read := approvals.ArgsRead(r.When)
		if len(read) == 0 {
			continue
		}
		if slices.ContainsFunc(servers, func(s tools.ServerConfig) bool { return !listed[s.Name] && mayMatchServer(r.Tool, s.Name) }) {
			continue // a server that has not listed its tools may have one it matches
		}
		var matched []string
		for _, n := range names {
			if !approvals.MatchesNone(r.Tool, []string{n}) {
				matched = append(matched, n)
			}
		}
		if len(matched) == 0 {
			continue // UnmatchedRules says so
		}
		for _, arg := range read {
			if !slices.ContainsFunc(matched, func(n string) bool { return mayTake(schemas[n], arg) }) {
				out = append(out, UnknownArg{Rule: r, Arg: arg, Tools: matched})
			}
		}
	}
	return out
}

// mayMatchServer reports whether the tool glob may match a tool of the
// MCP server named server (server__…): whether the glob's literal start,
// before its first pattern character, fits the start of such names.
func mayMatchServer(glob, server string) bool {
	lit := glob
	if i := strings.IndexAny(glob, `*?[\`); i >= 0 {
		lit = glob[:i]
	}
	prefix := server + "__"
	return strings.HasPrefix(prefix, lit) || strings.HasPrefix(lit, prefix)
}

// mayTake reports whether a call valid for schema may have an argument
// named arg: a property of that name, or other properties allowed (any
// schema that does not say additionalProperties: false, or that has
// patternProperties or is no object schema it can read).
func mayTake(schema json.RawMessage, arg string) bool {
	var s struct {
		Properties           map[string]json.RawMessage `json:"properties"`
		PatternProperties    map[string]json.RawMessage `json:"patternProperties"`
		AdditionalProperties json.RawMessage            `json:"additionalProperties"`
	}
	if len(schema) == 0 || json.Unmarshal(schema, &s) != nil {
		return true
	}
	_, named := s.Properties[arg]
	return named || len(s.PatternProperties) > 0 || strings.TrimSpace(string(s.AdditionalProperties)) != "false"
}
