package botsetup

import (
	"cmp"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/toolgate/toolgate/agent"
	"github.com/toolgate/toolgate/tools"
)

// OpenAIMaxTools is how many tools OpenAI's Chat Completions accepts in a
// request: it refuses one offering more (400, array_above_max_length),
// whatever tool the model would have called.
const OpenAIMaxTools = 128

// toolLimit watches how many tools the model is offered (every tool of the
// registry: built-ins, and each MCP server's tools or, until it has listed
// them, its stand-in) against a limit. Build checks it once the tools are
// loaded (check); after that, every change of the registry (an MCP server
// that connects late, or whose tool list changes) is checked again, and
// logged as an error when it leaves the model over the limit: every model
// request would then fail. Nothing is dropped to stay under it.
type toolLimit struct {
	max     int
	setting string // names max, such as MODEL_MAX_TOOLS
	file    string // names the config file, such as CONFIG_FILE
	servers []tools.ServerConfig
	reg     *agent.Registry
	log     *slog.Logger

	mu sync.Mutex
	// status reports the MCP servers; nil until check has run, and the
	// changes are not watched until then.
	status func() []tools.ServerStatus
	// logged is the shares last logged as over the limit, "" if the
	// tools were within it since.
	logged string
}

// toolShares is how many tools the model is offered, and from where.
type toolShares struct {
	total, builtins int
	servers         []serverShare // in configuration order
}

// serverShare is an MCP server's share of the tools.
type serverShare struct {
	name  string
	tools int
	// standIn says the server has not listed its tools yet: its one tool
	// is the stand-in that says so.
	standIn bool
}

// count counts the registry's tools by source.
func (l *toolLimit) count(status []tools.ServerStatus) toolShares {
	var sh toolShares
	index := map[string]int{}
	for i, s := range l.servers {
		index[s.Name] = i
		sh.servers = append(sh.servers, serverShare{name: s.Name})
	}
	for _, t := range l.reg.List() {
		sh.total++
		// A server's tools are named <server>__<tool>, and no server
		// name has "__" in it.
		if server, _, ok := strings.Cut(t.Name, "__"); ok {
			if i, ok := index[server]; ok {
				sh.servers[i].tools++
				continue
			}
		}
		sh.builtins++
	}
	for _, st := range status {
		if i, ok := index[st.Name]; ok && !st.Connected && st.Tools == 0 && sh.servers[i].tools == 1 {
			if _, ok := l.reg.Lookup(tools.StandInName(st.Name)); ok {
				sh.servers[i].standIn = true
			}
		}
	}
	return sh
}

// String lists the shares: "3 built-in, 90 from MCP server github, ...".
func (sh toolShares) String() string {
	parts := []string{fmt.Sprintf("%d built-in", sh.builtins)}
	for _, s := range sh.servers {
		p := fmt.Sprintf("%d from MCP server %s", s.tools, s.name)
		if s.standIn {
			p += " (not connected yet: a stand-in, its tools count once it has listed them)"
		}
		parts = append(parts, p)
	}
	return strings.Join(parts, ", ")
}

// advice says what to do about too many tools.
func (l *toolLimit) advice() string {
	return fmt.Sprintf("remove MCP servers from mcp_servers in %s (or built-in tools from builtin_tools), "+
		"have a server offer fewer tools (the config file cannot pick a server's tools; many servers can be told which to offer, such as the GitHub server with its toolsets), "+
		"or, if the model server accepts more tools, raise %s (0: no limit)", l.file, l.setting)
}

// check is the check at start: it fails when the model would be offered
// more tools than the limit, and otherwise starts watching the changes.
func (l *toolLimit) check(status func() []tools.ServerStatus) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	sh := l.count(status())
	if sh.total > l.max {
		return fmt.Errorf("%s: the model would be offered %d tools, over the limit of %d (a model server refuses every request offering more tools than it allows; OpenAI allows %d): %s; %s",
			l.setting, sh.total, l.max, OpenAIMaxTools, sh, l.advice())
	}
	l.status = status
	return nil
}

// changed checks the registry after a change, once check has passed: it
// logs an error when the tools are over the limit, once for each change
// of their shares, and says when they are within it again.
func (l *toolLimit) changed() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.status == nil {
		return // the tools are still loading: check counts them
	}
	sh := l.count(l.status())
	switch over := sh.total > l.max; {
	case over && sh.String() != l.logged:
		l.logged = sh.String()
		l.log.Error("the model is offered more tools than "+l.setting+" allows: every model request will fail until there are fewer",
			"tools", sh.total, "max", l.max, "shares", l.logged, "fix", l.advice())
	case !over && l.logged != "":
		l.logged = ""
		l.log.Info("the model is offered no more tools than "+l.setting+" allows again", "tools", sh.total, "max", l.max)
	}
}

// newToolLimit returns the watch of p's limit on reg, or nil when p sets
// none.
func newToolLimit(p Parts, reg *agent.Registry) *toolLimit {
	if p.MaxTools <= 0 {
		return nil
	}
	log := p.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &toolLimit{
		max:     p.MaxTools,
		setting: cmp.Or(p.MaxToolsSetting, "the tool limit"),
		file:    cmp.Or(p.File.Setting, "the config file"),
		servers: p.File.Tools.Servers,
		reg:     reg,
		log:     log,
	}
}
