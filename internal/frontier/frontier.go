// Package frontier serves frontier.select: an agent asks the host to install a new
// frontier — its own "compact now". The selection is durable: the session's agent loop
// folds at the end of the current turn (or of the next, when none runs), with the same
// call, sections and records as any fold, and the head moves to the current instruction
// text there. Asking again before that fold answers the same selection. A session with
// no model route has no agent to fold it, and is refused no_route.
package frontier

import (
	"context"

	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// Method is the method this package serves.
const Method = "frontier.select"

// CodeNoRoute refuses a selection in a session with no model route.
const CodeNoRoute = "no_route"

// Selected is frontier.select's reply.
type Selected struct {
	Scheduled bool `json:"scheduled"`
	// CoversThrough is an evidence ref the fold covers, with everything recorded before
	// it: the request that first selected the frontier.
	CoversThrough string `json:"covers_through"`
}

// Service is the frontier.select service.
type Service struct {
	// Routed reports whether the session has a model route, and so an agent that folds.
	Routed func() bool
}

// Serve implements host.Service.
func (s Service) Serve(ctx context.Context, req *host.Request) host.Outcome {
	var none struct{}
	if err := req.Decode(&none); err != nil {
		return host.Reply(host.Error(host.CodeInvalidRequest, "frontier.select takes no parameters: %v", err))
	}
	if s.Routed == nil || !s.Routed() {
		return host.Reply(host.Error(CodeNoRoute, "session %s has no model route, so no agent to fold it: name one as "+
			"route under [agent] in kiln.toml, with its [routes.<name>], and serve the session with kiln serve", req.Session.Name))
	}
	return host.Outcome{Commit: func(tx *store.Tx, req *host.Request) (wire.Reply, error) {
		sel := store.FrontierSelection{SessionID: req.Session.ID, ExecutionID: req.ExecutionID, RequestID: req.ID(),
			CoversThrough: host.RequestRef(req.ID())}
		if _, err := tx.SelectFrontier(&sel); err != nil {
			return wire.Reply{}, err
		}
		return host.OK(Selected{Scheduled: true, CoversThrough: sel.CoversThrough}), nil
	}}
}
