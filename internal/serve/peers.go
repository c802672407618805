package serve

import (
	"context"
	"errors"
	"fmt"

	"github.com/kilnrt/kiln/internal/peer"
	"github.com/kilnrt/kiln/internal/store"
)

// Deliverer is a Runtime told of the inputs recorded for its session by others, such
// as a peer's request: it decides each one's attention and wakes its agent.
type Deliverer interface {
	Deliver(ctx context.Context, ev store.Event) error
}

// AgentActivity is a Runtime whose agent says what it does: one of peer's activities.
type AgentActivity interface {
	AgentActivity() string
}

// Peers are the daemon's sessions as package peer drives them.
type Peers struct{ D *Daemon }

var _ peer.Sessions = Peers{}

// Open opens session name as a peer of parent: with the parent's configuration (its
// interpreter, environment, limits and MCP servers), in the daemon's workspace rather
// than the parent's working directory.
func (p Peers) Open(ctx context.Context, parent, name string) error {
	ps, err := p.D.Session(parent)
	if err != nil {
		return err
	}
	ps.mu.Lock()
	cfg := ps.st.Config
	ps.mu.Unlock()
	cfg.ID, cfg.Cwd = name, ""
	_, err = p.D.Create(ctx, cfg)
	return err
}

// Deliver tells session name's runtime of its input ev, starting the runtime if need be.
func (p Peers) Deliver(ctx context.Context, name string, ev store.Event) error {
	s, err := p.D.Session(name)
	if err != nil {
		return err
	}
	rt, err := s.runtime(ctx)
	if err != nil {
		return err
	}
	d, ok := rt.(Deliverer)
	if !ok {
		return fmt.Errorf("serve: session %s takes no inputs from others", name)
	}
	s.touch()
	return d.Deliver(ctx, ev)
}

// Stop stops session name; one stopped already is no error.
func (p Peers) Stop(ctx context.Context, name, reason string) error {
	s, err := p.D.Session(name)
	if err != nil {
		return err
	}
	if err := s.Stop(reason); err != nil && !errors.Is(err, ErrStopped) {
		return err
	}
	return nil
}

// Activity says what session name does now; "" when the daemon does not hold it.
func (p Peers) Activity(name string) string {
	s, err := p.D.Session(name)
	if err != nil {
		return ""
	}
	s.mu.Lock()
	stopped, running, rt := s.st.State == StateStopped, s.running != nil, s.rt
	s.mu.Unlock()
	switch {
	case stopped:
		return peer.ActivityStopped
	case running:
		return peer.ActivityWorking
	}
	if a, ok := rt.(AgentActivity); ok {
		return a.AgentActivity()
	}
	return peer.ActivityIdle
}
