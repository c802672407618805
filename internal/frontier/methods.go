package frontier

import "github.com/kilnrt/kiln/internal/host"

// Parts are what the family's method needs of the session that serves it.
type Parts interface {
	// Routed reports whether an agent with a model route runs the session.
	Routed() bool
}

// Methods are the family's host request methods, built from the session's parts.
func Methods(p Parts) []host.Method {
	return []host.Method{{Name: Method, Service: Service{Routed: p.Routed}}}
}
