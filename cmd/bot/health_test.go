package main

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/toolgate/toolgate/tools"
)

// fakeApp is a slackState whose Socket Mode is connected or not, and
// which is shutting down or not.
type fakeApp struct {
	connected, draining bool
}

func (a fakeApp) Connected() bool { return a.connected }
func (a fakeApp) Draining() bool  { return a.draining }

type fakeStore struct{ err error }

func (s *fakeStore) Ping(context.Context) error { return s.err }

func TestReadyz(t *testing.T) {
	disconnected := tools.ServerStatus{Name: "files", Transport: "stdio", LastError: "exit status 1 (token sk-secret-mcp)"}
	connected := tools.ServerStatus{Name: "github", Transport: "http", Connected: true, Tools: 3}
	tests := []struct {
		name       string
		connected  bool
		draining   bool
		storeErr   error
		servers    []tools.ServerStatus
		wantStatus int
		want       readiness
	}{
		{
			name: "ready", connected: true, servers: []tools.ServerStatus{connected},
			wantStatus: http.StatusOK,
			want:       readiness{Ready: true, SocketMode: "connected", Store: "ok", MCPServers: []tools.ServerStatus{connected}},
		},
		{
			name: "mcp server down is reported, not fatal", connected: true, servers: []tools.ServerStatus{disconnected, connected},
			wantStatus: http.StatusOK,
			want: readiness{Ready: true, SocketMode: "connected", Store: "ok", MCPServers: []tools.ServerStatus{
				{Name: "files", Transport: "stdio", LastError: "exit status 1 (token [redacted])"}, connected,
			}},
		},
		{
			name: "socket mode down", connected: false,
			wantStatus: http.StatusServiceUnavailable,
			want:       readiness{Error: "socket mode is not connected", SocketMode: "disconnected", Store: "ok", MCPServers: []tools.ServerStatus{}},
		},
		{
			name: "shutting down", connected: true, draining: true,
			wantStatus: http.StatusServiceUnavailable,
			want:       readiness{Error: "shutting down", SocketMode: "connected", Store: "ok", MCPServers: []tools.ServerStatus{}},
		},
		{
			name: "store down", connected: true, storeErr: errors.New("dial tcp 10.0.0.1:6379: connection refused"),
			wantStatus: http.StatusServiceUnavailable,
			want: readiness{
				Error: "store: dial tcp 10.0.0.1:6379: connection refused", SocketMode: "connected",
				Store: "dial tcp 10.0.0.1:6379: connection refused", MCPServers: []tools.ServerStatus{},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := &fakeStore{err: tt.storeErr}
			p := probes{
				app:      fakeApp{connected: tt.connected, draining: tt.draining},
				store:    st,
				gatherer: prometheus.NewRegistry(),
				redact:   newRedactor("sk-secret-mcp"),
			}
			if tt.servers != nil {
				p.mcp = func() []tools.ServerStatus { return tt.servers }
			}
			rec := httptest.NewRecorder()
			p.handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
			if rec.Code != tt.wantStatus {
				t.Errorf("status %d, want %d", rec.Code, tt.wantStatus)
			}
			if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			var got readiness
			if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
				t.Fatalf("body %q: %v", rec.Body, err)
			}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(tt.want)
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("body\n got %s\nwant %s", gotJSON, wantJSON)
			}
			for _, key := range []string{`"socket_mode"`, `"store"`, `"mcp_servers"`} {
				if !strings.Contains(rec.Body.String(), key) {
					t.Errorf("body %s has no %s", rec.Body, key)
				}
			}
		})
	}
}

func TestHealthzAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "toolgate_test_total", Help: "A test counter."})
	reg.MustRegister(c)
	c.Inc()
	st := &fakeStore{err: errors.New("down")}
	h := probes{app: fakeApp{}, store: st, gatherer: reg}.handler()

	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
	if rec.Code != http.StatusOK || strings.TrimSpace(rec.Body.String()) != "ok" {
		t.Errorf("/healthz while not ready: %d %q, want 200 ok", rec.Code, rec.Body)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "toolgate_test_total 1") {
		t.Errorf("/metrics: %d %q, want the registry's counters", rec.Code, rec.Body)
	}

	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/healthz", nil))
	if rec.Code != http.StatusMethodNotAllowed {
		t.Errorf("POST /healthz: %d, want 405", rec.Code)
	}
}

func TestPprofOnlyWhenAsked(t *testing.T) {
	reg := prometheus.NewRegistry()
	st := &fakeStore{}
	for _, on := range []bool{false, true} {
		h := probes{app: fakeApp{}, store: st, gatherer: reg, pprof: on}.handler()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/debug/pprof/goroutine?debug=1", nil))
		served := rec.Code == http.StatusOK && strings.Contains(rec.Body.String(), "goroutine profile")
		if served != on {
			t.Errorf("PPROF=%v: /debug/pprof/goroutine answered %d (%d bytes)", on, rec.Code, rec.Body.Len())
		}
	}
}

// flakyStore fails every other ping, starting with the first, and counts
// them.
type flakyStore struct {
	mu    sync.Mutex
	pings int
}

func (s *flakyStore) Ping(context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pings++
	if s.pings%2 == 1 {
		return errors.New("i/o timeout")
	}
	return nil
}

func (s *flakyStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.pings
}

// /readyz asks a store that answers now and then once, and says the same
// of it everywhere: it never answers 200 with the store not ok, nor puts
// a store error beside store ok.
func TestReadyzAsksTheStoreOnce(t *testing.T) {
	st := &flakyStore{}
	h := probes{app: fakeApp{connected: true}, store: st, gatherer: prometheus.NewRegistry()}.handler()
	for i := range 6 {
		before := st.count()
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		var got readiness
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
			t.Fatalf("probe %d: body %q: %v", i+1, rec.Body, err)
		}
		if rec.Code == http.StatusOK && (got.Store != "ok" || !got.Ready) {
			t.Errorf("probe %d: 200 with %+v", i+1, got)
		}
		if got.Store == "ok" && (strings.Contains(got.Error, "store") || rec.Code != http.StatusOK) {
			t.Errorf("probe %d: store ok beside status %d and error %q", i+1, rec.Code, got.Error)
		}
		if got.Store != "ok" && (got.Ready || rec.Code == http.StatusOK || got.Error != "store: "+got.Store) {
			t.Errorf("probe %d: store %q beside status %d, ready %v and error %q", i+1, got.Store, rec.Code, got.Ready, got.Error)
		}
		if n := st.count() - before; n != 1 {
			t.Errorf("probe %d pinged the store %d times, want once", i+1, n)
		}
	}
}
