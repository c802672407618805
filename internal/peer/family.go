package peer

import "github.com/kilnrt/kiln/internal/host"

// Parts are what the family's methods need of the session that serves them.
type Parts interface {
	// Peers is the daemon's peer service; nil where there is no daemon, which serves none.
	Peers() *Service
}

// Methods are the family's host request methods and their aliases, built from the
// session's parts; none without a peer service.
func Methods(p Parts) []host.Method {
	s := p.Peers()
	if s == nil {
		return nil
	}
	return []host.Method{
		{Name: OpenMethod, Service: host.ServiceFunc(s.open)},
		{Name: OpenAlias, Service: host.ServiceFunc(s.open)},
		{Name: SendMethod, Service: host.ServiceFunc(s.send)},
		{Name: SendAlias, Service: host.ServiceFunc(s.send)},
		{Name: ResultMethod, Service: host.ServiceFunc(s.result)},
		{Name: SubmitResultMethod, Service: host.ServiceFunc(s.submitResult)},
		{Name: CancelMethod, Service: host.ServiceFunc(s.cancelRequest)},
		{Name: GetMethod, Service: host.ServiceFunc(s.get)},
		{Name: ListMethod, Service: host.ServiceFunc(s.list)},
		{Name: StopMethod, Service: host.ServiceFunc(s.stop)},
	}
}
