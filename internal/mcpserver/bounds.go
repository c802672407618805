package mcpserver

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/kilnrt/kiln/internal/api"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bounds of what clients hold of the server at once.
const (
	// MaxSessions bounds the HTTP MCP sessions open at once: each holds memory until it
	// is closed or idles out (SessionTimeout). At the bound, a new session takes the
	// place of the one idle longest; it is refused only when none is idle.
	MaxSessions = 256
	// MaxSessionCalls bounds the requests one client has in flight: over HTTP, a
	// session's POSTs not yet answered (one past it gets 429); on stdio, its calls not
	// yet answered (past it, the next message is read once one is answered).
	MaxSessionCalls = 16
	// MaxPosts bounds the POSTs to /mcp not yet answered, across sessions.
	MaxPosts = 256
	// MaxBodyBytes bounds a POST's body: one JSON-RPC message, read whole, within
	// api.BodyReadTimeout, before it is served.
	MaxBodyBytes = 4 << 20
	// WriteTimeout bounds one write of an answer over HTTP: a client that takes no
	// bytes for this long is cut off.
	WriteTimeout = api.StreamWriteTimeout
)

// ErrStopping is a tool call made while the server stops.
var ErrStopping = errors.New("mcpserver: the server is stopping")

// calls holds the tool calls in flight, by session, so that they can be ended.
type calls struct {
	mu      sync.Mutex
	stopped bool
	by      map[*mcp.ServerSession]*sessionCalls
}

// sessionCalls are one session's calls in flight.
type sessionCalls struct {
	n     int
	ended context.Context // done once its calls are to end
	end   context.CancelFunc
}

// enter begins a call of ss: its context ends with ctx or when the calls of ss are
// ended. done ends the call.
func (c *calls) enter(ctx context.Context, ss *mcp.ServerSession) (_ context.Context, done func(), _ error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopped {
		return nil, nil, ErrStopping
	}
	sc := c.by[ss]
	if sc == nil {
		if c.by == nil {
			c.by = map[*mcp.ServerSession]*sessionCalls{}
		}
		sc = &sessionCalls{}
		sc.ended, sc.end = context.WithCancel(context.Background())
		c.by[ss] = sc
	}
	sc.n++
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(sc.ended, cancel)
	return ctx, func() {
		stop()
		cancel()
		c.mu.Lock()
		defer c.mu.Unlock()
		if sc.n--; sc.n == 0 && c.by[ss] == sc {
			delete(c.by, ss)
			sc.end()
		}
	}, nil
}

// end ends the calls in flight of the session named id.
func (c *calls) end(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ss, sc := range c.by {
		if ss.ID() == id {
			sc.end()
		}
	}
}

// stop ends every call in flight, and refuses those to come.
func (c *calls) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.stopped = true
	for _, sc := range c.by {
		sc.end()
	}
}

// Run serves one client on t until the client leaves or ctx ends; the end of ctx ends
// the calls in flight too. On stdio a client has at most MaxSessionCalls calls
// unanswered: the next message is read once one is answered, so a client that reads no
// answers cannot make the server hold more.
func (s *Server) Run(ctx context.Context, t mcp.Transport) error {
	defer context.AfterFunc(ctx, s.calls.stop)()
	return s.Server.Run(ctx, pacedTransport{t})
}

// Close ends the calls in flight, refuses those to come, and closes the sessions, which
// outlive the HTTP requests that made them.
func (s *Server) Close() {
	s.calls.stop()
	s.idle.stop()
	for ss := range s.Sessions() {
		ss.Close()
	}
}

// pacedTransport is a transport whose connection reads no message while its client has
// MaxSessionCalls calls unanswered.
type pacedTransport struct{ mcp.Transport }

func (t pacedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &pacedConn{Connection: conn, unanswered: make(chan struct{}, MaxSessionCalls)}, nil
}

// pacedConn holds a place in unanswered for each call read and not yet answered.
type pacedConn struct {
	mcp.Connection
	unanswered chan struct{}
}

func (c *pacedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	msg, err := c.Connection.Read(ctx)
	if req, ok := msg.(*jsonrpc.Request); ok && err == nil && req.ID.IsValid() {
		select {
		case c.unanswered <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return msg, err
}

func (c *pacedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	err := c.Connection.Write(ctx, msg)
	if _, ok := msg.(*jsonrpc.Response); ok { // the server answers only the client's calls
		select {
		case <-c.unanswered:
		default:
		}
	}
	return err
}

// posts counts the POSTs to /mcp not yet answered, by session (an opening POST's is "").
type posts struct {
	mu    sync.Mutex
	total int
	by    map[string]int
}

// enter counts a POST of session; false if that would take the session past
// MaxSessionCalls or the server past MaxPosts, or an opening POST past MaxSessions
// with the sessions open.
func (p *posts) enter(session string, open func() int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.total >= MaxPosts,
		session != "" && p.by[session] >= MaxSessionCalls,
		session == "" && p.by[""]+open() >= MaxSessions:
		return false
	}
	if p.by == nil {
		p.by = map[string]int{}
	}
	p.by[session]++
	p.total++
	return true
}

// leave uncounts a POST of session.
func (p *posts) leave(session string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.by[session]--; p.by[session] == 0 {
		delete(p.by, session)
	}
	p.total--
}

// Handler serves s as streamable HTTP, closing sessions idle (no request served, no
// stream open) past its idle timeout, and at MaxSessions the one idle longest.
//   - A POST's body is read whole first, at most MaxBodyBytes within
//     api.BodyReadTimeout (413 past the bound, 408 past the time), and a batch is
//     refused (400): each message is a POST of its own.
//   - A POST past MaxSessionCalls of its session, MaxPosts in all, or one that would
//     open a session past MaxSessions with none idle, is refused (429).
//   - A DELETE ends its session's calls in flight before the session closes.
//   - Each write of an answer is bounded by WriteTimeout.
func (s *Server) Handler(logger *slog.Logger) http.Handler {
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s.Server },
		&mcp.StreamableHTTPOptions{Logger: logger}) // s.idle closes idle sessions, streams counted
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		session := r.Header.Get("Mcp-Session-Id")
		switch r.Method {
		case http.MethodDelete:
			if session != "" {
				s.calls.end(session)
				defer s.idle.forget(session)
			}
		case http.MethodPost:
			if !readBody(w, r) {
				return
			}
			if session == "" && s.open() >= MaxSessions {
				s.idle.reclaim()
			}
			if !s.posts.enter(session, s.open) {
				refuseBusy(w, session)
				return
			}
			defer s.posts.leave(session)
		}
		if session != "" && s.idle.begin(session) {
			defer s.idle.end(session, false)
		}
		h.ServeHTTP(boundedWrites{w, http.NewResponseController(w)}, r)
		if opened := w.Header().Get("Mcp-Session-Id"); session == "" && opened != "" && s.exists(opened) {
			s.idle.end(opened, true)
		}
	})
}

// exists says whether the server holds the session named id.
func (s *Server) exists(id string) bool {
	for ss := range s.Sessions() {
		if ss.ID() == id {
			return true
		}
	}
	return false
}

// closeSession ends the calls of the session named id and closes it.
func (s *Server) closeSession(id string) {
	s.calls.end(id)
	for ss := range s.Sessions() {
		if ss.ID() == id {
			ss.Close()
		}
	}
}

// open counts the server's sessions.
func (s *Server) open() int {
	n := 0
	for range s.Sessions() {
		n++
	}
	return n
}

// readBody reads r's body whole, in place, or answers why not: false when it has.
func readBody(w http.ResponseWriter, r *http.Request) bool {
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Now().Add(api.BodyReadTimeout))
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	rc.SetReadDeadline(time.Time{})
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		http.Error(w, fmt.Sprintf("the body is over the limit of %d bytes", MaxBodyBytes), http.StatusRequestEntityTooLarge)
		return false
	case err != nil:
		http.Error(w, fmt.Sprintf("reading the body (at most %v): %v", api.BodyReadTimeout, err), http.StatusRequestTimeout)
		return false
	case bytes.HasPrefix(bytes.TrimLeft(data, " \t\r\n"), []byte("[")):
		http.Error(w, "a JSON-RPC batch is not served: send each message in a POST of its own", http.StatusBadRequest)
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(data))
	return true
}

// refuseBusy answers a POST refused by posts.enter.
func refuseBusy(w http.ResponseWriter, session string) {
	msg := fmt.Sprintf("kiln holds its most MCP sessions, %d, each in use: close one (DELETE with its Mcp-Session-Id), or retry once one has been idle",
		MaxSessions)
	if session != "" {
		msg = fmt.Sprintf("kiln answers at most %d requests of a session, and %d in all, at once: wait for an answer",
			MaxSessionCalls, MaxPosts)
	}
	http.Error(w, msg, http.StatusTooManyRequests)
}

// boundedWrites is a ResponseWriter each of whose writes and flushes is bounded by
// WriteTimeout.
type boundedWrites struct {
	http.ResponseWriter
	rc *http.ResponseController
}

func (b boundedWrites) Write(p []byte) (int, error) {
	b.rc.SetWriteDeadline(time.Now().Add(WriteTimeout))
	return b.ResponseWriter.Write(p)
}

func (b boundedWrites) Flush() {
	b.rc.SetWriteDeadline(time.Now().Add(WriteTimeout))
	b.rc.Flush()
}

// Unwrap is the ResponseWriter b wraps, for http.ResponseController.
func (b boundedWrites) Unwrap() http.ResponseWriter { return b.ResponseWriter }
