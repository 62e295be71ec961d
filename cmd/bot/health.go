package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/toolgate/toolgate/tools"
)

// readyTimeout bounds the checks of one /readyz request.
const readyTimeout = 3 * time.Second

// slackState is what /readyz asks the Slack app. Its Ready (Socket Mode
// connected and the store reachable) is not asked: /readyz reckons the
// same from Connected and its own ping of the store, since a second ping
// could answer otherwise than the first (see readyz).
type slackState interface {
	Connected() bool
	// Draining reports whether the app is shutting down, taking no new
	// work.
	Draining() bool
}

// pinger is what /readyz asks the store.
type pinger interface {
	Ping(ctx context.Context) error
}

// probes are the sources of the HTTP endpoints.
type probes struct {
	app   slackState
	store pinger
	// mcp reports the MCP servers; nil when there are none.
	mcp func() []tools.ServerStatus
	// gatherer serves /metrics.
	gatherer prometheus.Gatherer
	// redact cleans error texts shown by /readyz.
	redact redactor
	// pprof serves net/http/pprof under /debug/pprof/.
	pprof bool
}

// readiness is the body of /readyz.
type readiness struct {
	Ready bool `json:"ready"`
	// Error says why the bot is not ready.
	Error string `json:"error,omitempty"`
	// SocketMode is "connected" or "disconnected".
	SocketMode string `json:"socket_mode"`
	// Store is "ok" or why the store cannot be reached.
	Store string `json:"store"`
	// MCPServers is informational: a disconnected server makes its tools
	// answer with an error but does not make the bot unready, since
	// restarting the bot would not bring the server back.
	MCPServers []tools.ServerStatus `json:"mcp_servers"`
}

// handler serves /healthz, /readyz and /metrics.
//
// /healthz answers 200 "ok" as long as the process serves HTTP. /readyz
// answers 200 when Socket Mode is connected and the store answers, 503
// otherwise, with a JSON body detailing Socket Mode, the store and each MCP
// server. MCP servers are reported but never make /readyz fail: they are
// reconnected in the background and their tools report the outage to the
// model. /metrics is the Prometheus exposition of gatherer. With pprof,
// /debug/pprof/ serves the Go profiler.
func (p probes) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", p.readyz)
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.gatherer, promhttp.HandlerOpts{}))
	if p.pprof {
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	return mux
}

// readyz answers /readyz from one look at each source: Socket Mode is
// asked once and the store pinged once, and the status, ready, error,
// socket_mode and store all follow from these two answers. Asking again
// for the status (as slackapp.App.Ready, which pings the store itself,
// would) could get another answer from a flaky store: a 200 with a store
// error in the body, or a 503 blaming a store the body calls ok, and two
// pings per probe.
func (p probes) readyz(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	body := readiness{SocketMode: "disconnected", Store: "ok", MCPServers: []tools.ServerStatus{}}
	connected := p.app.Connected()
	if connected {
		body.SocketMode = "connected"
	}
	storeErr := p.store.Ping(ctx)
	if storeErr != nil {
		body.Store = p.redact.String(storeErr.Error())
	}
	if p.mcp != nil {
		for _, s := range p.mcp() {
			s.LastError = p.redact.String(s.LastError)
			body.MCPServers = append(body.MCPServers, s)
		}
	}
	status := http.StatusOK
	switch {
	case p.app.Draining():
		status = http.StatusServiceUnavailable
		body.Error = "shutting down"
	case !connected:
		status = http.StatusServiceUnavailable
		body.Error = "socket mode is not connected"
	case storeErr != nil:
		status = http.StatusServiceUnavailable
		body.Error = "store: " + body.Store
	default:
		body.Ready = true
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
