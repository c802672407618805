package remote

import (
	"context"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/kilnrt/kiln/internal/certs"
	"github.com/kilnrt/kiln/internal/host"
)

// tlsServer is an HTTPS server of h on loopback with a self-signed pair, and the pair's
// certificate file, which a target names as its ca_file.
func tlsServer(t *testing.T, h http.Handler) (*httptest.Server, string) {
	t.Helper()
	cert, key, err := certs.SelfSigned(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	conf, err := certs.ServerConfig(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes refused are the tests'
	srv.TLS = conf
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv, cert
}

// testClient is a client of a kiln target at url, with token "secret".
func testClient(t *testing.T, url, ca string, slack time.Duration) *client {
	t.Helper()
	c, err := newClient(Target{Name: "t", Kind: KindKiln, URL: url, TokenEnv: "TOKEN", CAFile: ca},
		func(string) string { return "secret" }, slack)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.close)
	return c
}

// code is err's Error code, "" when it is none.
func code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func TestAnswersAreBounded(t *testing.T) {
	var sent atomic.Int64
	srv, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		chunk := make([]byte, 64<<10)
		for i := range chunk {
			chunk[i] = ' '
		}
		for sent.Load() < 100<<20 { // a 100 MB body
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	c := testClient(t, srv.URL, ca, 0)
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := c.do(t.Context(), "GET", "/v1/sessions/x", nil, 0, &session{})
	runtime.ReadMemStats(&after)
	if code(err) != CodeRemoteError || !strings.Contains(err.Error(), "over 1048576 bytes") {
		t.Fatalf("a 100 MB answer: %v", err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 16<<20 {
		t.Errorf("reading it allocated %d bytes", alloc)
	}
	srv.CloseClientConnections()
	if n := sent.Load(); n >= 100<<20 {
		t.Errorf("the client read all %d bytes", n)
	}
}

func TestAnswerAtTheBoundIsRead(t *testing.T) {
	for _, tc := range []struct {
		size int
		ok   bool
	}{{MaxResponseBytes, true}, {MaxResponseBytes + 1, false}} {
		body := `{"id":"` + strings.Repeat("a", tc.size-len(`{"id":""}`)) + `"}`
		c := &client{target: Target{Name: "t"}}
		var s session
		err := c.decode("GET /", 200, []byte(body), &s)
		if (err == nil) != tc.ok {
			t.Errorf("an answer of %d bytes: %v", tc.size, err)
		}
	}
}

func TestAStalledRemoteCostsItsWaitAndSlack(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	conns := make(chan net.Conn, 4)
	go func() { // accepts, handshakes, reads the request, and never answers
		for {
			conn, err := ln.Accept()
			if err != nil {
				close(conns)
				return
			}
			conns <- conn
		}
	}()
	defer func() {
		ln.Close()
		for conn := range conns {
			conn.Close()
		}
	}()
	c := testClient(t, "https://"+ln.Addr().String(), "", 200*time.Millisecond)
	start := time.Now()
	_, err = c.do(t.Context(), "GET", "/v1/sessions/x", nil, 100*time.Millisecond, nil)
	if code(err) != CodeRemoteError || !strings.Contains(err.Error(), "did not answer within 300ms") {
		t.Fatalf("a stalled remote: %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("it took %s", d)
	}
}

func TestFailuresHaveTheirCodes(t *testing.T) {
	api, ca := tlsServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/auth":
			if r.Header.Get("Authorization") != "Bearer secret" {
				t.Errorf("token sent: %q", r.Header.Get("Authorization"))
			}
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"status":401,"code":"unauthorized","detail":"wrong token"}`))
		case "/garbage":
			w.Write([]byte("\x00\xffnot json"))
		case "/problem":
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"status":409,"code":"busy","detail":"a cell runs"}`))
		case "/bare500":
			w.WriteHeader(http.StatusInternalServerError)
			w.Write([]byte("oops"))
		}
	}))
	plain := httptest.NewServer(http.NotFoundHandler())
	defer plain.Close()
	other, _, err := certs.SelfSigned(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closed.Close()
	for _, tc := range []struct {
		name, url, ca, path, want string
	}{
		{"wrong token", api.URL, ca, "/auth", CodeUnauthorized},
		{"garbage", api.URL, ca, "/garbage", CodeRemoteError},
		{"status without problem", api.URL, ca, "/bare500", CodeRemoteError},
		{"wrong CA", api.URL, other, "/auth", CodeTLSFailed},
		{"system CA", api.URL, "", "/auth", CodeTLSFailed},
		{"not TLS", strings.Replace(plain.URL, "http:", "https:", 1), ca, "/", CodeTLSFailed},
		{"unreachable", "https://" + closed.Addr().String(), ca, "/", CodeTargetUnreachable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := testClient(t, tc.url, tc.ca, 0).do(t.Context(), "GET", tc.path, nil, 0, &session{})
			if code(err) != tc.want {
				t.Fatalf("got %v; want %s", err, tc.want)
			}
		})
	}
	var p *Problem
	_, err = testClient(t, api.URL, ca, 0).do(t.Context(), "GET", "/problem", nil, 0, nil)
	if !errors.As(err, &p) || p.Code != "busy" || reply(err).Code != CodeRemoteError || !strings.Contains(reply(err).Message, "busy") {
		t.Fatalf("a problem: %v", err)
	}
}

func TestAnExecTargetThatFailsSaysWhy(t *testing.T) {
	c, err := newClient(Target{Name: "t", Kind: KindExec, Command: []string{"sh", "-c", "read line; echo no route to build-host >&2; exit 255"}},
		func(string) string { return "" }, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	_, err = c.do(t.Context(), "GET", "/v1/sessions", nil, 0, nil)
	if code(err) != CodeTargetUnreachable || !strings.Contains(err.Error(), "no route to build-host") || !strings.Contains(err.Error(), "exit status 255") {
		t.Fatalf("got %v", err)
	}
	missing, err := newClient(Target{Name: "t", Kind: KindExec, Command: []string{filepath.Join(t.TempDir(), "nothing")}},
		func(string) string { return "" }, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer missing.close()
	if _, err := missing.do(t.Context(), "GET", "/v1/sessions", nil, 0, nil); code(err) != CodeTargetUnreachable {
		t.Fatalf("a command that does not exist: %v", err)
	}
}

func TestAnExecTargetCarriesHTTP(t *testing.T) {
	// The command is this test binary serving one connection on its stdio.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	c, err := newClient(Target{Name: "t", Kind: KindExec, Command: []string{self, "-test.run=^TestHelperServeStdio$"}},
		func(string) string { return "" }, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("KILN_REMOTE_TEST_HELPER", "1")
	defer c.close()
	for range 3 { // one connection, one process, several requests
		var s session
		if _, err := c.do(t.Context(), "GET", "/v1/sessions/x", nil, 0, &s); err != nil || s.ID != "x" || s.Generation != "g-1" {
			t.Fatalf("got %+v, %v", s, err)
		}
	}
}

// TestHelperServeStdio serves HTTP on one connection over its standard input and
// output, when run by TestAnExecTargetCarriesHTTP.
func TestHelperServeStdio(t *testing.T) {
	if os.Getenv("KILN_REMOTE_TEST_HELPER") != "1" {
		t.Skip("a helper process")
	}
	ln := &oneConn{conn: stdioConn{}, done: make(chan struct{})}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"id":"x","state":"open","generation":"g-1","running":""}`))
	}), ConnState: func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed {
			close(ln.done)
		}
	}}
	srv.Serve(ln)
}

// oneConn is a listener of one connection; Accept then blocks until it closes.
type oneConn struct {
	conn  net.Conn
	done  chan struct{}
	taken bool
}

func (l *oneConn) Accept() (net.Conn, error) {
	if !l.taken {
		l.taken = true
		return l.conn, nil
	}
	<-l.done
	return nil, net.ErrClosed
}
func (l *oneConn) Close() error   { return nil }
func (l *oneConn) Addr() net.Addr { return commandAddr("stdio") }

// stdioConn is the process's standard input and output as a connection.
type stdioConn struct{}

func (stdioConn) Read(p []byte) (int, error)       { return os.Stdin.Read(p) }
func (stdioConn) Write(p []byte) (int, error)      { return os.Stdout.Write(p) }
func (stdioConn) Close() error                     { return os.Stdout.Close() }
func (stdioConn) LocalAddr() net.Addr              { return commandAddr("stdio") }
func (stdioConn) RemoteAddr() net.Addr             { return commandAddr("stdio") }
func (stdioConn) SetDeadline(time.Time) error      { return nil }
func (stdioConn) SetReadDeadline(time.Time) error  { return nil }
func (stdioConn) SetWriteDeadline(time.Time) error { return nil }

func TestTargetsRefusedAsConfigured(t *testing.T) {
	for _, tgt := range []Target{
		{Name: "a", Kind: KindKiln, URL: "http://a:1"},
		{Name: "a", Kind: KindKiln, URL: "unix://"},
		{Name: "a", Kind: KindKiln, URL: "https://"},
		{Name: "a", Kind: KindKiln, URL: "https://a:1", CAFile: "/nonexistent"},
		{Name: "a", Kind: KindExec},
		{Name: "a", Kind: "ssh"},
	} {
		if _, err := newClient(tgt, os.Getenv, 0); err == nil {
			t.Errorf("%+v: no error", tgt)
		}
	}
	s := &Service{Targets: map[string]Target{"a": {Name: "a", Kind: KindKiln, URL: "https://a:1", TokenEnv: "NONE_SET"}}}
	defer s.Close()
	c, err := s.client("a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.do(context.Background(), "GET", "/", nil, 0, nil); code(err) != CodeUnauthorized || !strings.Contains(err.Error(), "NONE_SET") {
		t.Errorf("a token not set: %v", err)
	}
	if _, err := s.client("b"); code(err) != CodeNotFound || !strings.Contains(err.Error(), "[remotes.b]") {
		t.Errorf("a target not configured: %v", err)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(200, []byte(`{"id":"s:c-1","generation":"g-1","status":"ok","output":[{"stream":"result","text":"2"}]}`))
	f.Add(409, []byte(`{"status":409,"code":"busy","detail":"x"}`))
	f.Add(401, []byte("\xff"))
	f.Add(200, []byte(`{"output":[{"stream":"result","text":"'0123456789abcdef'"}]}`))
	f.Fuzz(func(t *testing.T, status int, data []byte) {
		c := &client{target: Target{Name: "t"}}
		var r record
		err := c.decode("POST /", status, data, &r)
		if err == nil && (status < 200 || status > 299) {
			t.Fatalf("status %d decoded", status)
		}
		if err != nil {
			msg := reply(err).Message
			if !utf8.ValidString(msg) || len(msg) > MaxResponseBytes+MaxDetailBytes {
				t.Fatalf("a message of %d bytes, valid UTF-8 %v", len(msg), utf8.ValidString(msg))
			}
			return
		}
		markPattern.FindStringSubmatch(resultText(r))
		if out := host.OK(called{Record: r}); out.Kind != "ok" {
			t.Fatalf("a decoded record does not encode: %+v", out)
		} else if _, err := outcomeOf(out); err != nil {
			t.Fatalf("a decoded record does not encode: %v", err)
		}
	})
}
