package remote

import "github.com/kilnrt/kiln/internal/host"

// Parts are what the family's methods need of the session that serves them.
type Parts interface {
	// Remote is the session's remote service: its targets, and its connections to them.
	Remote() *Service
}

// Methods are the family's host request methods, built from the session's parts.
func Methods(p Parts) []host.Method {
	s := p.Remote()
	return []host.Method{
		{Name: EnsureMethod, Service: host.ServiceFunc(s.ensure)},
		{Name: CallMethod, Service: host.ServiceFunc(s.call)},
		{Name: CancelMethod, Service: host.ServiceFunc(s.cancel)},
		{Name: CloseMethod, Service: host.ServiceFunc(s.close)},
	}
}
