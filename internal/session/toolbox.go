package session

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/kilnrt/kiln/internal/tools"
)

// Toolbox is the tools of a session or of a program runner: their registry, the
// catalog a session's generations load, and the MCP servers it holds open.
type Toolbox struct {
	registry *tools.Registry
	payload  []byte // nil when there are no tools
	clients  []*tools.Client
}

// OpenToolbox builds the registry of fns and of the tools of servers, which it
// connects. Its errors are the tools package's, which say so. A server's tool the
// registry cannot hold (a name over its bound, one that maps to another's attribute) is
// left out, and logged; the others are served.
func OpenToolbox(ctx context.Context, fns []tools.Tool, servers []tools.Server, timeout time.Duration, logger *slog.Logger) (_ *Toolbox, err error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	tb := &Toolbox{registry: tools.New(timeout)}
	defer func() {
		if err != nil {
			tb.Close()
		}
	}()
	for _, t := range fns {
		if err := tb.registry.Add(t); err != nil {
			return nil, err
		}
	}
	for _, s := range servers {
		c, err := tools.Connect(ctx, s, logger)
		if err != nil {
			return nil, err
		}
		tb.clients = append(tb.clients, c)
		list, err := c.Tools(ctx)
		if err != nil {
			return nil, err
		}
		for _, t := range list {
			if err := tb.registry.Add(t); errors.Is(err, tools.ErrInvalidTool) {
				logger.Warn("an MCP server's tool left out", "server", s.Name, "err", err)
			} else if err != nil {
				return nil, err
			}
		}
	}
	if tb.payload, err = tb.registry.Payload(); err != nil {
		return nil, err
	}
	return tb, nil
}

// Registry is the tools' registry.
func (tb *Toolbox) Registry() *tools.Registry { return tb.registry }

// names are the tools as namespace.name, in the order they were added.
func (tb *Toolbox) names() []string {
	var out []string
	for _, e := range tb.registry.Catalog() {
		out = append(out, e.Namespace+"."+e.Name)
	}
	return out
}

// Close stops the MCP servers.
func (tb *Toolbox) Close() {
	for _, c := range tb.clients {
		c.Close()
	}
}
