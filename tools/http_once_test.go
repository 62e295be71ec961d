package tools

import (
	"crypto/tls"
	"crypto/x509"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// streamResetter speaks raw HTTP/2: it takes each request whole (as far
// as the server goes, the request was made), counts it, and answers the
// first by resetting its stream with PROTOCOL_ERROR, as a proxy does when
// its upstream answered badly; later ones get a 200.
type streamResetter struct {
	mu  sync.Mutex
	got []string
}

func (s *streamResetter) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.got...)
}

func (s *streamResetter) serve(c *tls.Conn) {
	defer c.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if fr.WriteSettings() != nil {
		return
	}
	bodies, methods := map[uint32][]byte{}, map[uint32]string{}
	done := func(id uint32) {
		s.mu.Lock()
		s.got = append(s.got, methods[id]+" "+string(bodies[id]))
		first := len(s.got) == 1
		s.mu.Unlock()
		if first {
			_ = fr.WriteRSTStream(id, http2.ErrCodeProtocol)
			return
		}
		var block strings.Builder
		_ = hpack.NewEncoder(&block).WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: []byte(block.String()), EndHeaders: true, EndStream: true})
	}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.MetaHeadersFrame:
			methods[f.StreamID] = f.PseudoValue("method")
			if f.StreamEnded() {
				done(f.StreamID)
			}
		case *http2.DataFrame:
			bodies[f.StreamID] = append(bodies[f.StreamID], f.Data()...)
			if n := len(f.Data()); n > 0 {
				_ = fr.WriteWindowUpdate(0, uint32(n))
			}
			if f.StreamEnded() {
				done(f.StreamID)
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		}
	}
}

// A POST or DELETE through the HTTP tools' transport (an approved
// http_request, an MCP tools/call) reaches the server once, even when
// the server could take HTTP/2 and reset the stream after taking the
// request: Go's HTTP/2 client would send it again and return the second
// answer as the only one.
func TestHTTPTransportSendsAWriteOnce(t *testing.T) {
	for _, method := range []string{http.MethodPost, http.MethodDelete} {
		t.Run(method, func(t *testing.T) {
			rs := &streamResetter{}
			var mu sync.Mutex
			var overHTTP1 []string
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				body, _ := io.ReadAll(r.Body)
				mu.Lock()
				overHTTP1 = append(overHTTP1, r.Method+" "+string(body))
				mu.Unlock()
			}))
			srv.TLS = &tls.Config{NextProtos: []string{"h2", "http/1.1"}}
			srv.Config.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){
				"h2": func(_ *http.Server, c *tls.Conn, _ http.Handler) { rs.serve(c) },
			}
			srv.StartTLS()
			defer srv.Close()

			tr := newHTTPTransport()
			roots := x509.NewCertPool()
			roots.AddCert(srv.Certificate())
			tr.TLSClientConfig = &tls.Config{RootCAs: roots}
			req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+"/payments", strings.NewReader(`{"amount":100}`))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := (&http.Client{Transport: tr}).Do(req)
			if err == nil {
				resp.Body.Close()
			}
			mu.Lock()
			defer mu.Unlock()
			if got := append(rs.requests(), overHTTP1...); len(got) != 1 {
				t.Errorf("the %s reached the server %d times (%q; answer: %v), want once", method, len(got), got, err)
			}
		})
	}
}
