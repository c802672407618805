package skills

import (
	"context"
	"errors"
	"sync"

	"github.com/kilnrt/kiln/internal/host"
)

// The host methods this package serves.
const (
	IndexMethod = "skills.index"
	LoadMethod  = "skills.load"
)

// Error codes of skills.load.
const (
	CodeNotFound = "not_found" // no skill of that id in the index
	CodeRefused  = "refused"   // the id was refused; the message says why
	CodeChanged  = "changed"   // its file changed since it was indexed
)

// Service serves skills.index and skills.load over roots. skills.load answers from the
// most recent index, made by skills.index or Scan: a body whose bytes no longer have
// the digest indexed is refused, never half-read. Reading a skill grants nothing.
type Service struct {
	Roots Roots

	mu      sync.Mutex
	indexed *Set
}

// Scan indexes the roots now and returns the set.
func (s *Service) Scan() (Set, error) {
	set, err := Scan(s.Roots)
	if err != nil {
		return Set{}, err
	}
	s.mu.Lock()
	s.indexed = &set
	s.mu.Unlock()
	return set, nil
}

// index is the most recent index, made now if there is none.
func (s *Service) index() (Set, error) {
	s.mu.Lock()
	indexed := s.indexed
	s.mu.Unlock()
	if indexed != nil {
		return *indexed, nil
	}
	return s.Scan()
}

// refusedID is a refusal as skills.index reports it.
type refusedID struct {
	ID     string `json:"id"`
	Root   string `json:"root"`
	Reason string `json:"reason"`
}

// Index is the skills.index service: the valid ids, and the refused ones with why.
func (s *Service) Index() host.Service {
	return host.ServiceFunc(func(ctx context.Context, req *host.Request) host.Outcome {
		var none struct{}
		if err := req.Decode(&none); err != nil {
			return host.Reply(host.Error(host.CodeInvalidRequest, "skills.index takes no parameters: %v", err))
		}
		set, err := s.Scan()
		if err != nil {
			return host.Reply(host.Error(host.CodeInvalidRequest, "%v", err))
		}
		ids := make([]string, 0, len(set.Skills))
		for _, sk := range set.Skills {
			ids = append(ids, sk.ID)
		}
		refused := make([]refusedID, 0, len(set.Refused))
		for _, r := range set.Refused {
			refused = append(refused, refusedID{r.ID, r.Root, r.Reason})
		}
		return host.Reply(host.OK(map[string]any{"ids": ids, "refused": refused}))
	})
}

// Load is the skills.load service: {id} → {id, body, digest}.
func (s *Service) Load() host.Service {
	return host.ServiceFunc(func(ctx context.Context, req *host.Request) host.Outcome {
		var p struct {
			ID string `json:"id"`
		}
		if err := req.Decode(&p); err != nil || p.ID == "" {
			return host.Reply(host.Error(host.CodeInvalidRequest, `skills.load takes {"id": "<skill id>"}`))
		}
		set, err := s.index()
		if err != nil {
			return host.Reply(host.Error(host.CodeInvalidRequest, "%v", err))
		}
		sk, ok := set.Lookup(p.ID)
		if !ok {
			if r, refused := set.Refusal(p.ID); refused {
				return host.Reply(host.Error(CodeRefused, "skill %q (%s root) was refused: %s", r.ID, r.Root, r.Reason))
			}
			return host.Reply(host.Error(CodeNotFound, "no skill %q in the index; skills.index lists the ids", p.ID))
		}
		body, err := Reread(sk)
		if errors.Is(err, ErrChanged) {
			return host.Reply(host.Error(CodeChanged, "skill %q: %v; index again to load what it holds now", sk.ID, err))
		}
		if err != nil {
			return host.Reply(host.Error(CodeChanged, "skill %q could not be read again: %v", sk.ID, err))
		}
		return host.Reply(host.OK(map[string]any{"id": sk.ID, "body": body, "digest": sk.Digest}))
	})
}
