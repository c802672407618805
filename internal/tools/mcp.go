package tools

import (
	"context"
	"encoding/base64"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/lossless"
	"github.com/kilnrt/kiln/internal/proc"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sys/unix"
)

// Bounds of an MCP server's conversation, kiln's own.
const (
	// MaxMessageBytes bounds one message from a server (a line on stdio, an event or a
	// JSON body over HTTP); a server that sends a larger one is cut off, and its calls
	// fail with ErrUnavailable. A result that fits but is over what a reply to a cell
	// carries is refused by the host as reply_too_large.
	MaxMessageBytes = 4 << 20
	// DefaultStartTimeout bounds a server's start: spawn (or connect) to the answer of
	// initialize and the tool list.
	DefaultStartTimeout = 30 * time.Second
	// writeTimeout bounds one write to a stdio server: one that stops reading its stdin
	// for this long is cut off.
	writeTimeout = 10 * time.Second
	// stopGrace is how long a stdio server has to exit once its stdin is closed, before
	// its process group is killed.
	stopGrace = 2 * time.Second
	// stderrTail is how much of a stdio server's stderr is kept for diagnostics.
	stderrTail = 4 << 10
	// MaxServerRequests bounds the requests a server has sent kiln that kiln has not yet
	// answered (kiln serves none: sampling, elicitation, roots; it answers each, with an
	// error or an empty result). An answer is a line on a stdio server's stdin, or a POST
	// to an HTTP server, taken when the POST is answered. A server past the bound is cut
	// off: it sends faster than it takes the answers, and each would be held, over HTTP
	// with a goroutine and a connection of its own.
	MaxServerRequests = 64
)

// Server describes an MCP server whose tools join a registry in namespace Name: a
// command spoken to on its stdin and stdout, or a streamable HTTP endpoint.
type Server struct {
	Name    string   // the namespace
	Command []string // argv of a stdio server
	URL     string   // endpoint of a streamable HTTP server
	Env     []string // a stdio server's environment; nil means the host's
	Dir     string   // a stdio server's working directory; empty means the host's
}

// Client is a connected MCP server.
type Client struct {
	name    string
	session *mcp.ClientSession
	log     *slog.Logger

	// Of a stdio server:
	cmd    *exec.Cmd
	stderr *proc.Tail
	exited chan struct{} // closed once the process is reaped, and its group killed
	pipes  []*os.File    // the host's ends of its stdin and stdout

	// Of an HTTP server: its connections, kept for the POSTs of kiln's answers.
	conns *http.Transport

	drop      context.CancelFunc // drops the answers to the server's requests not yet taken
	closeOnce sync.Once
	// results receives the raw results of a stdio server's tools/call responses;
	// nil for an HTTP server.
	results *rawResults
}

// Connect starts or reaches s and completes MCP's initialize within ctx (bounded by
// DefaultStartTimeout). A server that fails to start, exits, or does not answer is an
// error wrapping ErrUnavailable, with what it wrote on stderr.
func Connect(ctx context.Context, s Server, logger *slog.Logger) (_ *Client, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if !ValidNamespace(s.Name) {
		return nil, fmt.Errorf("%w: mcp server name %q is not a Python identifier", ErrInvalidTool, s.Name)
	}
	c := &Client{name: s.Name, log: logger.With("mcp", s.Name)}
	var transport mcp.Transport
	switch {
	case len(s.Command) > 0 && s.URL == "":
		if transport, err = c.spawn(s); err != nil {
			return nil, err
		}
	case s.URL != "" && len(s.Command) == 0:
		// A connection of its own for each answer in flight, kept for the next: with the
		// default two idle per host, most answers would open a new one.
		c.conns = http.DefaultTransport.(*http.Transport).Clone()
		c.conns.MaxIdleConnsPerHost = MaxServerRequests
		transport = &mcp.StreamableClientTransport{Endpoint: s.URL, HTTPClient: &http.Client{Transport: boundedBodies{c.conns}},
			MaxEventSize: MaxMessageBytes, MaxRetries: 1, DisableStandaloneSSE: true}
	default:
		return nil, fmt.Errorf("%w: mcp server %s: give a command or a URL", ErrInvalidTool, s.Name)
	}
	answers, drop := context.WithCancel(context.Background())
	c.drop = drop
	ctx, cancel := context.WithTimeout(ctx, DefaultStartTimeout)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "kiln", Version: "1"}, &mcp.ClientOptions{Logger: c.log})
	c.session, err = client.Connect(ctx, boundedTransport{transport, answers, drop, c.results}, nil)
	if err != nil {
		err = c.unavailable("starting", err)
		c.stop()
		return nil, err
	}
	return c, nil
}

// spawn starts a stdio server in its own process group, its stdout read through the
// message bound and its stdin written under writeTimeout.
func (c *Client) spawn(s Server) (mcp.Transport, error) {
	path, err := exec.LookPath(s.Command[0])
	if err != nil {
		return nil, fmt.Errorf("%w: mcp server %s: %w", ErrUnavailable, s.Name, err)
	}
	if err := proc.KeepInherited(); err != nil {
		return nil, fmt.Errorf("tools: mcp server %s: %w", s.Name, err)
	}
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("tools: mcp server %s: %w", s.Name, err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("tools: mcp server %s: %w", s.Name, err)
	}
	c.stderr = proc.NewTail(stderrTail)
	c.cmd = exec.Command(path, s.Command[1:]...)
	c.cmd.Env, c.cmd.Dir = s.Env, s.Dir
	c.cmd.Stdin, c.cmd.Stdout, c.cmd.Stderr = inR, outW, c.stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	c.cmd.WaitDelay = stopGrace // a descendant holding stderr does not hold up the reaping
	err = c.cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("%w: mcp server %s: %w", ErrUnavailable, s.Name, err)
	}
	c.exited = make(chan struct{})
	c.pipes = []*os.File{inW, outR}
	c.results = &rawResults{}
	go func() {
		// Once the server has exited, and before it is reaped, while its pid still names
		// its group (Setpgid): what it left in the group ends with it.
		pid := c.cmd.Process.Pid
		var info unix.Siginfo
		for unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil) == unix.EINTR {
		}
		syscall.Kill(-pid, syscall.SIGKILL)
		c.cmd.Wait()
		close(c.exited)
	}()
	return &mcp.IOTransport{Reader: readCloser{newTapReader(outR, c.results), outR}, Writer: &deadlineWriter{f: inW}, MaxLineLength: MaxMessageBytes}, nil
}

// deadlineWriter writes a pipe, each write bounded by writeTimeout. After a write fails,
// every later write fails at once with that error: otherwise the writes queued behind
// it, each a request or an answer, would each wait out writeTimeout in turn.
type deadlineWriter struct {
	f      *os.File
	failed atomic.Pointer[error] // the first failure
}

func (w *deadlineWriter) Write(p []byte) (int, error) {
	if err := w.failed.Load(); err != nil {
		return 0, *err
	}
	w.f.SetWriteDeadline(time.Now().Add(writeTimeout))
	n, err := w.f.Write(p)
	if err != nil {
		w.failed.CompareAndSwap(nil, &err)
	}
	return n, err
}

func (w *deadlineWriter) Close() error { return w.f.Close() }

// boundedTransport is a transport, stdio or HTTP, whose connection breaks once the
// server has more than MaxServerRequests requests unanswered, and drops the server's
// notifications as it reads them: kiln heeds none, and the SDK would queue each and
// start a goroutine for it. The answers still being written are dropped once answers
// is done, which the connection does itself once it reads no more.
type boundedTransport struct {
	mcp.Transport
	answers context.Context
	drop    context.CancelFunc // ends answers
	results *rawResults        // of a stdio server; nil over HTTP
}

func (t boundedTransport) Connect(ctx context.Context) (mcp.Connection, error) {
	conn, err := t.Transport.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &boundedConn{Connection: conn, answers: t.answers, drop: t.drop, results: t.results}, nil
}

// boundedConn counts the server's requests that kiln has not yet answered.
type boundedConn struct {
	mcp.Connection
	unanswered atomic.Int64
	answers    context.Context // done once the answers being written are moot
	drop       context.CancelFunc
	results    *rawResults // nil over HTTP
}

// Read is the server's next response or request; it skips notifications, and fails
// once the server is past the bound.
func (c *boundedConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.Connection.Read(ctx)
		if req, ok := msg.(*jsonrpc.Request); ok && err == nil {
			if !req.ID.IsValid() {
				continue // a notification
			}
			if c.unanswered.Add(1) > MaxServerRequests {
				msg, err = nil, fmt.Errorf("the server has more than %d requests to kiln unanswered", MaxServerRequests)
			}
		}
		if err != nil {
			c.drop() // the session is over: answers on their way would only hold it open
		}
		return msg, err
	}
}

// Write sends msg; an answer to the server counts as taken once written, or given up.
func (c *boundedConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	if _, ok := msg.(*jsonrpc.Response); !ok { // kiln answers only the server's requests
		if c.results != nil {
			c.results.expect(ctx, msg)
		}
		return c.Connection.Write(ctx, msg)
	}
	defer c.unanswered.Add(-1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(c.answers, cancel)()
	return c.Connection.Write(ctx, msg)
}

// boundedBodies is a RoundTripper that bounds every JSON response body to
// MaxMessageBytes; event streams are bounded per event by the transport.
type boundedBodies struct{ next http.RoundTripper }

func (b boundedBodies) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := b.next.RoundTrip(req)
	if err == nil && !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		resp.Body = &limitedBody{ReadCloser: resp.Body, left: MaxMessageBytes}
	}
	return resp, err
}

// limitedBody fails a read past its bound.
type limitedBody struct {
	io.ReadCloser
	left int64
}

// errTooLarge is a message over MaxMessageBytes.
var errTooLarge = fmt.Errorf("a message over %d bytes", MaxMessageBytes)

func (l *limitedBody) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, errTooLarge
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.ReadCloser.Read(p)
	l.left -= int64(n)
	return n, err
}

// unavailable is err, from doing what, wrapped in ErrUnavailable with what the server's
// process says of itself.
func (c *Client) unavailable(doing string, err error) error {
	return fmt.Errorf("%w: mcp server %s: %s: %v%s", ErrUnavailable, c.name, doing, err, c.diagnostics())
}

// diagnostics is how a stdio server's process ended and its stderr tail, if any.
func (c *Client) diagnostics() string {
	if c.cmd == nil {
		return ""
	}
	var b strings.Builder
	select {
	case <-c.exited:
		fmt.Fprintf(&b, "; the server exited: %s", c.cmd.ProcessState)
	case <-time.After(100 * time.Millisecond): // a process whose pipe closed is reaped by then
	}
	if tail := strings.TrimSpace(c.stderr.String()); tail != "" {
		fmt.Fprintf(&b, "; its stderr ends: %s", tail)
	}
	return b.String()
}

// Tools lists the server's tools, each calling it, in namespace Name.
func (c *Client) Tools(ctx context.Context) ([]Tool, error) {
	ctx, cancel := context.WithTimeout(ctx, DefaultStartTimeout)
	defer cancel()
	var out []Tool
	params := &mcp.ListToolsParams{}
	for page := 0; ; page++ {
		if page > MaxTools { // pages with no tools and a cursor each, for ever
			return nil, fmt.Errorf("%w: mcp server %s: over %d pages of tools", ErrInvalidTool, c.name, MaxTools)
		}
		res, err := c.session.ListTools(ctx, params)
		if err != nil {
			return nil, c.unavailable("listing its tools", err)
		}
		for _, t := range res.Tools {
			if len(out) >= MaxTools {
				return nil, fmt.Errorf("%w: mcp server %s: over %d tools", ErrInvalidTool, c.name, MaxTools)
			}
			var schema jsontext.Value
			if t.InputSchema != nil {
				if schema, err = json.Marshal(t.InputSchema, json.Deterministic(true)); err != nil {
					return nil, fmt.Errorf("%w: mcp server %s: tool %s: input schema: %w", ErrInvalidTool, c.name, t.Name, err)
				}
			}
			out = append(out, Tool{Namespace: c.name, Name: t.Name, Description: t.Description,
				InputSchema: schema, Handler: c.caller(t.Name)})
		}
		if res.NextCursor == "" {
			return out, nil
		}
		params = &mcp.ListToolsParams{Cursor: res.NextCursor}
	}
}

// caller is the handler that calls the server's tool name.
func (c *Client) caller(name string) Handler {
	return func(ctx context.Context, arguments jsontext.Value) (jsontext.Value, error) {
		slot := &rawSlot{}
		if c.results != nil {
			ctx = context.WithValue(ctx, rawSlotKey{}, slot)
			defer c.results.forget(slot)
		}
		res, err := c.session.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: rawJSON(arguments)})
		var rpcErr *jsonrpc.Error
		switch {
		case err == nil && slot.result != nil:
			return c.rawResult(name, slot.result)
		case err != nil && ctx.Err() != nil:
			return nil, fmt.Errorf("tools: mcp server %s: %s: %w", c.name, name, context.Cause(ctx))
		case errors.As(err, &rpcErr):
			return nil, &Error{Message: rpcErr.Message}
		case err != nil:
			return nil, c.unavailable("calling "+name, err)
		case res.IsError:
			return nil, &Error{Message: contentText(res.Content)}
		case res.StructuredContent != nil:
			if text, ok := structuredText(res); ok {
				return text, nil
			}
			data, err := json.Marshal(res.StructuredContent, json.Deterministic(true))
			if err != nil {
				return nil, c.unavailable("reading the result of "+name, err)
			}
			return data, nil
		}
		return json.Marshal(contentText(res.Content))
	}
}

// structuredText is res's structured content as the text block that serializes it,
// which the specification asks a server to send beside it, compacted: that text has
// every digit of its numbers, where the SDK decodes the structured content's to
// float64s. A text block is that serialization if it is strict JSON that decodes as the
// SDK decoded the structured content.
func structuredText(res *mcp.CallToolResult) (jsontext.Value, bool) {
	for _, item := range res.Content {
		t, ok := item.(*mcp.TextContent)
		if !ok {
			continue
		}
		v := jsontext.Value(t.Text).Clone()
		var decoded any
		if v.Compact() != nil || stdjson.Unmarshal(v, &decoded) != nil || !reflect.DeepEqual(decoded, res.StructuredContent) {
			continue
		}
		return v, true
	}
	return nil, false
}

// rawJSON is JSON the MCP SDK sends as it is.
type rawJSON []byte

func (r rawJSON) MarshalJSON() ([]byte, error) { return r, nil }

// contentText is the text of a result's content: its text blocks, joined by newlines,
// and a note naming each block of another kind.
func contentText(content []mcp.Content) string {
	parts := make([]string, 0, len(content))
	for _, item := range content {
		switch x := item.(type) {
		case *mcp.TextContent:
			parts = append(parts, x.Text)
		case *mcp.ImageContent:
			parts = append(parts, fmt.Sprintf("[kiln: an image, %s, %d bytes]", x.MIMEType, len(x.Data)))
		case *mcp.AudioContent:
			parts = append(parts, fmt.Sprintf("[kiln: audio, %s, %d bytes]", x.MIMEType, len(x.Data)))
		case *mcp.ResourceLink:
			parts = append(parts, fmt.Sprintf("[kiln: a resource link, %s]", x.URI))
		case *mcp.EmbeddedResource:
			if x.Resource != nil && x.Resource.Text != "" {
				parts = append(parts, x.Resource.Text)
			} else if x.Resource != nil {
				parts = append(parts, fmt.Sprintf("[kiln: a resource, %s]", x.Resource.URI))
			}
		default:
			parts = append(parts, fmt.Sprintf("[kiln: content of type %T]", item))
		}
	}
	return strings.Join(parts, "\n")
}

// Close ends the session; a stdio server has stopGrace to exit once its stdin is closed,
// then its process group is killed, and it is reaped. A session whose close waits on a
// server that stopped taking kiln's answers (a stdio server that stopped reading, an
// HTTP server that holds their POSTs) ends once the server is stopped.
func (c *Client) Close() {
	c.closeOnce.Do(func() {
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			if c.session != nil {
				c.session.Close() // a server already gone says so; there is nothing left to do
			}
		}()
		select {
		case <-closed:
		case <-time.After(stopGrace):
		}
		c.stop() // the answers it has not taken are dropped, its writes fail, and the close ends
		<-closed
		c.closeIdle() // the close's own request is done with its connection
	})
}

// closeIdle closes an HTTP server's connections that nothing uses.
func (c *Client) closeIdle() {
	if c.conns != nil {
		c.conns.CloseIdleConnections()
	}
}

// stop drops the answers the server has not taken and closes an HTTP server's idle
// connections; it ends a stdio server's process group and waits for its reaping.
func (c *Client) stop() {
	c.drop()
	c.closeIdle()
	if c.cmd == nil || c.exited == nil {
		return
	}
	defer func() {
		for _, f := range c.pipes {
			f.Close() // closed already when the session was: a second close does nothing
		}
	}()
	timer := time.NewTimer(stopGrace)
	defer timer.Stop()
	select {
	case <-c.exited:
	case <-timer.C:
		// Only while the leader is unreaped does its pid name its group.
		syscall.Kill(-c.cmd.Process.Pid, syscall.SIGKILL)
		<-c.exited
	}
}

// readCloser reads through a tap and closes the pipe beneath it.
type readCloser struct {
	io.Reader
	io.Closer
}

// rawResult is the value of a tools/call result as the server wrote it: its structured
// content, compacted, every digit and every level of nesting kept; else the text of its
// content, as a JSON string; an error whose message is that text if it says isError.
// Only the content is decoded, and it is checked to be strict JSON, as the structured
// content is when a program or a cell takes it.
func (c *Client) rawResult(name string, raw []byte) (jsontext.Value, error) {
	m, ok := members(raw)
	if !ok {
		return nil, c.unavailable("reading the result of "+name, errors.New("the result is not a JSON object"))
	}
	var content lossless.Value
	if text := m[`"content"`]; text != nil {
		var err error
		if content, err = lossless.Decode(text); err != nil {
			return nil, c.unavailable("reading the result of "+name, err)
		}
	}
	if isError := m[`"isError"`]; string(isError) == "true" {
		return nil, &Error{Message: rawContentText(content)}
	}
	if structured := m[`"structuredContent"`]; structured != nil && string(structured) != "null" {
		text := compact(structured)
		if _, err := lossless.Decode(text); err != nil {
			return nil, c.unavailable("reading the result of "+name, err)
		}
		return text, nil
	}
	return json.Marshal(rawContentText(content))
}

// rawContentText is contentText of content blocks decoded from the server's text.
func rawContentText(content lossless.Value) string {
	blocks, _ := content.(lossless.Array)
	parts := make([]string, 0, len(blocks))
	for _, b := range blocks {
		o, _ := b.(lossless.Object)
		str := func(key string) string {
			v, _ := o.Get(key)
			s, _ := v.(lossless.String)
			return string(s)
		}
		switch str("type") {
		case "text":
			parts = append(parts, str("text"))
		case "image", "audio":
			kind := map[string]string{"image": "an image", "audio": "audio"}[str("type")]
			data, _ := base64.StdEncoding.DecodeString(str("data"))
			parts = append(parts, fmt.Sprintf("[kiln: %s, %s, %d bytes]", kind, str("mimeType"), len(data)))
		case "resource_link":
			parts = append(parts, fmt.Sprintf("[kiln: a resource link, %s]", str("uri")))
		case "resource":
			r, _ := o.Get("resource")
			ro, _ := r.(lossless.Object)
			text, _ := ro.Get("text")
			uri, _ := ro.Get("uri")
			if t, _ := text.(lossless.String); t != "" {
				parts = append(parts, string(t))
			} else {
				u, _ := uri.(lossless.String)
				parts = append(parts, fmt.Sprintf("[kiln: a resource, %s]", u))
			}
		default:
			parts = append(parts, fmt.Sprintf("[kiln: content of type %s]", str("type")))
		}
	}
	return strings.Join(parts, "\n")
}
