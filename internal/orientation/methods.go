package orientation

import "github.com/kilnrt/kiln/internal/host"

// Parts are what the family's methods need of the session that serves them.
type Parts interface {
	// Observed is svc with the session's instruction sources observed around it: a
	// change its reply makes to the instruction text is recorded as the host's.
	Observed(svc host.Service) host.Service
}

// Methods are the family's host request methods, built from the session's parts.
func Methods(p Parts) []host.Method {
	return []host.Method{
		{Name: StageMethod, Service: host.ServiceFunc(Stage)},
		{Name: CurrentMethod, Immediate: true, Service: host.ServiceFunc(Current)},
		{Name: AdoptMethod, Service: p.Observed(host.ServiceFunc(Adopt))},
	}
}
