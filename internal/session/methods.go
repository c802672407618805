package session

import (
	"context"

	"github.com/kilnrt/kiln/internal/ask"
	"github.com/kilnrt/kiln/internal/evidence"
	"github.com/kilnrt/kiln/internal/frontier"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/maintenance"
	"github.com/kilnrt/kiln/internal/orientation"
	"github.com/kilnrt/kiln/internal/policy"
	"github.com/kilnrt/kiln/internal/skills"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/tools"
	"github.com/kilnrt/kiln/internal/transcript"
	"github.com/kilnrt/kiln/internal/wait"
	"github.com/kilnrt/kiln/internal/workspace"
)

// Services are the parts of a session its host methods are built from. Open builds
// them once, before any method is registered.
type Services struct {
	Store     *store.Store
	Session   store.Session
	Workspace *workspace.Service
	Skills    *skills.Service
	Policy    *policy.Manager
	Tools     *tools.Registry      // empty when the session has no tools
	Header    *transcript.Observer // keeps the transcript's instruction header
	// OnInput answers a cell's input(); nil means no one answers.
	OnInput func(ctx context.Context, cellID, prompt string) (string, error)
	// OnSpeech is told each local.send once it is recorded.
	OnSpeech func(text string, r policy.Receipt)
	// Routed says whether an agent with a model route runs the session.
	Routed func() bool
}

// Method is one host request method a session serves.
type Method struct {
	// Name is the method as cells call it: await runtime.<Name>(…).
	Name string
	// Immediate methods are answered on the worker's reading goroutine, in the order
	// they arrive: they change nothing that another request reads, so they need no turn
	// in the router's queue (host.Router.HandleImmediate).
	Immediate bool
	// Service builds the method's service from the session's. A nil service leaves the
	// method out: a cell that calls it is answered unknown_method.
	Service func(*Services) host.Service
}

// Methods is the table of the host request methods every session serves, in one place.
//
// To add a method (docs/architecture.md walks one through):
//  1. write its service in the package of its family (internal/<family>): a type with
//     Serve(ctx, *host.Request) host.Outcome, and the method's name as a constant;
//  2. add one entry here, building the service from Services (add a member to Services
//     only when the service needs a part of the session no entry uses yet);
//  3. test it through a real workbench, and say in docs/host.md what it answers.
//
// The instruction text lists the methods this table registers, so a new one is
// announced to the model with no further change.
func Methods() []Method {
	return []Method{
		{Name: wait.Method, Service: func(*Services) host.Service { return wait.Service{} }},
		{Name: evidence.Method, Immediate: true, Service: func(*Services) host.Service { return evidence.Service{} }},
		{Name: workspace.InfoMethod, Immediate: true, Service: func(s *Services) host.Service { return s.Workspace.Info() }},
		{Name: workspace.RunMethod, Service: func(s *Services) host.Service { return s.Header.Around(s.Workspace.Run()) }},
		{Name: skills.IndexMethod, Immediate: true, Service: func(s *Services) host.Service { return s.Skills.Index() }},
		{Name: skills.LoadMethod, Immediate: true, Service: func(s *Services) host.Service { return s.Skills.Load() }},
		{Name: transcript.InstructionsMethod, Service: func(*Services) host.Service {
			return host.ServiceFunc(transcript.Instructions)
		}},
		{Name: ask.Method, Service: func(s *Services) host.Service { return ask.Service{Answer: s.OnInput} }},
		{Name: tools.Method, Service: func(s *Services) host.Service {
			if s.Tools.Len() == 0 {
				return nil
			}
			return tools.Service{Registry: s.Tools}
		}},
		{Name: policy.SendMethod, Service: func(s *Services) host.Service { return s.Policy.Send(s.OnSpeech) }},
		{Name: policy.ListMethod, Service: func(s *Services) host.Service { return s.Policy.List() }},
		{Name: policy.DescribeMethod, Service: func(s *Services) host.Service { return s.Policy.Describe() }},
		{Name: policy.ActivateMethod, Service: func(s *Services) host.Service { return s.Policy.ActivateService() }},
		{Name: maintenance.OriginateMethod, Service: func(s *Services) host.Service {
			return maintenance.Service{Skills: s.Skills.Digests}.Originate()
		}},
		{Name: maintenance.AssessMethod, Service: func(s *Services) host.Service {
			return maintenance.Service{Skills: s.Skills.Digests}.Assess()
		}},
		{Name: orientation.StageMethod, Service: func(*Services) host.Service { return host.ServiceFunc(orientation.Stage) }},
		{Name: orientation.CurrentMethod, Immediate: true, Service: func(*Services) host.Service {
			return host.ServiceFunc(orientation.Current)
		}},
		{Name: orientation.AdoptMethod, Service: func(s *Services) host.Service {
			return s.Header.Around(host.ServiceFunc(orientation.Adopt))
		}},
		{Name: frontier.Method, Service: func(s *Services) host.Service { return frontier.Service{Routed: s.Routed} }},
	}
}

// register adds each method of table to r, built from svc.
func register(r *host.Router, svc *Services, table []Method) {
	for _, m := range table {
		s := m.Service(svc)
		switch {
		case s == nil:
		case m.Immediate:
			r.HandleImmediate(m.Name, s)
		default:
			r.Handle(m.Name, s)
		}
	}
}
