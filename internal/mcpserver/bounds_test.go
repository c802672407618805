package mcpserver

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// scripted is a connection whose reads return its calls, one at a time, each read
// told on served.
type scripted struct {
	mcp.Connection
	next   int
	served chan int
}

func (s *scripted) Read(context.Context) (jsonrpc.Message, error) {
	s.next++
	id, _ := jsonrpc.MakeID(float64(s.next))
	s.served <- s.next
	return &jsonrpc.Request{ID: id, Method: "tools/call"}, nil
}

func (s *scripted) Write(context.Context, jsonrpc.Message) error { return nil }

// TestStdioReadsNoMoreWhileItsCallsAreUnanswered reads MaxSessionCalls calls and
// answers none: the read of the next waits for an answer. Its context's end ends that
// wait with the context's error, as it would not if the read had taken the call.
func TestStdioReadsNoMoreWhileItsCallsAreUnanswered(t *testing.T) {
	inner := &scripted{served: make(chan int, MaxSessionCalls+2)}
	conn := &pacedConn{Connection: inner, unanswered: make(chan struct{}, MaxSessionCalls)}
	for range MaxSessionCalls {
		if _, err := conn.Read(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	read := make(chan error, 1)
	go func() {
		_, err := conn.Read(ctx)
		read <- err
	}()
	for n := range inner.served {
		if n == MaxSessionCalls+1 {
			break // the call past the bound is read from the client
		}
	}
	cancel()
	if err := <-read; !errors.Is(err, context.Canceled) {
		t.Fatalf("a call past %d unanswered: read with %v; want it held until an answer", MaxSessionCalls, err)
	}

	// An answer makes room for one more call.
	if err := conn.Write(context.Background(), &jsonrpc.Response{}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Read(context.Background()); err != nil {
		t.Fatalf("a call after an answer: %v", err)
	}
}

// TestCallsEndWithTheirSessionOrTheServer ends one session's calls, then the server's:
// each call's context ends at the right one, and calls after the server's stop are
// refused.
func TestCallsEndWithTheirSessionOrTheServer(t *testing.T) {
	var c calls
	a, b := new(mcp.ServerSession), new(mcp.ServerSession)
	ctxA, doneA, err := c.enter(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	defer doneA()
	ctxB, doneB, err := c.enter(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	defer doneB()
	c.end(a.ID()) // both have the empty ID of a session not over HTTP
	ended(t, ctxA, "a call of a session whose calls were ended")
	ended(t, ctxB, "a call of a session whose calls were ended")

	var s calls
	ctx, done, err := s.enter(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	s.stop()
	ended(t, ctx, "a call in flight when the server stopped")
	done()
	if _, _, err := s.enter(context.Background(), a); !errors.Is(err, ErrStopping) {
		t.Errorf("a call after the stop: %v; want ErrStopping", err)
	}
	if len(s.by) != 0 {
		t.Errorf("%d sessions still held after their calls ended", len(s.by))
	}
}

// ended fails t unless ctx, the context of what, ends within a bound.
func ended(t *testing.T, ctx context.Context, what string) {
	t.Helper()
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatalf("%s went on", what)
	}
}
