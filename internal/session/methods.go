package session

import (
	"context"

	"github.com/kilnrt/kiln/internal/ask"
	"github.com/kilnrt/kiln/internal/evidence"
	"github.com/kilnrt/kiln/internal/frontier"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/maintenance"
	"github.com/kilnrt/kiln/internal/orientation"
	"github.com/kilnrt/kiln/internal/peer"
	"github.com/kilnrt/kiln/internal/policy"
	"github.com/kilnrt/kiln/internal/remote"
	"github.com/kilnrt/kiln/internal/skills"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/tools"
	"github.com/kilnrt/kiln/internal/transcript"
	"github.com/kilnrt/kiln/internal/wait"
	"github.com/kilnrt/kiln/internal/workspace"
)

// Services are the parts of a session its host methods are built from. Open builds
// them once, before any method is registered. A family's package names the parts it
// needs as an interface of its own (its Parts), which Services satisfies.
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
	// IsRouted says whether an agent with a model route runs the session.
	IsRouted func() bool
	// Remotes serves remote.*: the targets of a daemon's kiln.toml, none elsewhere.
	Remotes *remote.Service
	// PeerService serves peer.*: a daemon's, nil elsewhere.
	PeerService *peer.Service
}

// Peers is the session's peer service, nil when it serves none.
func (s *Services) Peers() *peer.Service { return s.PeerService }

// Remote is the session's remote service.
func (s *Services) Remote() *remote.Service { return s.Remotes }

// SkillDigests are the skills as they are now, by id and the digest of each body.
func (s *Services) SkillDigests() (map[string]string, error) { return s.Skills.Digests() }

// Observed is svc with the instruction sources observed around it.
func (s *Services) Observed(svc host.Service) host.Service { return s.Header.Around(svc) }

// Routed reports whether an agent with a model route runs the session.
func (s *Services) Routed() bool { return s.IsRouted != nil && s.IsRouted() }

// Methods are the host request methods every session serves: the session's own (waiting,
// evidence, the workspace, skills, the instruction text, input, tools, speech and the
// policy), then each family's, from its own package.
//
// The instruction text lists the methods the router registers, so a new one is
// announced to the model with no further change. docs/architecture.md walks through
// adding a method and a family.
func Methods(s *Services) []host.Method {
	methods := []host.Method{
		{Name: wait.Method, Service: wait.Service{}},
		{Name: evidence.Method, Immediate: true, Service: evidence.Service{}},
		{Name: workspace.InfoMethod, Immediate: true, Service: s.Workspace.Info()},
		{Name: workspace.RunMethod, Service: s.Observed(s.Workspace.Run())},
		{Name: skills.IndexMethod, Immediate: true, Service: s.Skills.Index()},
		{Name: skills.LoadMethod, Immediate: true, Service: s.Skills.Load()},
		{Name: transcript.InstructionsMethod, Service: host.ServiceFunc(transcript.Instructions)},
		{Name: ask.Method, Service: ask.Service{Answer: s.OnInput}},
		{Name: policy.SendMethod, Service: s.Policy.Send(s.OnSpeech)},
		{Name: policy.ListMethod, Service: s.Policy.List()},
		{Name: policy.DescribeMethod, Service: s.Policy.Describe()},
		{Name: policy.ActivateMethod, Service: s.Policy.ActivateService()},
	}
	if s.Tools.Len() > 0 {
		methods = append(methods, host.Method{Name: tools.Method, Service: tools.Service{Registry: s.Tools}})
	}
	for _, family := range families(s) {
		methods = append(methods, family...)
	}
	return methods
}

// families are the method families of packages of their own. Each family's Methods
// builds its methods from the parts of the session it names; adding a method to a
// family touches only its package, and adding a family is one line here.
func families(s *Services) [][]host.Method {
	return [][]host.Method{
		maintenance.Methods(s),
		orientation.Methods(s),
		frontier.Methods(s),
		remote.Methods(s),
		peer.Methods(s),
	}
}
