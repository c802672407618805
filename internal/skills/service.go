package skills

import (
	"context"
	"errors"
	"slices"
	"sync"

	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/wire"
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

// Service serves skills.index and skills.load over roots. What it offers is exactly the
// set the current generation loaded (see Offer): a skill written, changed or refused
// during a generation is reported as pending, and offered from the next generation on,
// so that what the index lists is what import kiln.skills.<id> gives. skills.load
// refuses a body whose bytes no longer have the digest offered, never half-reading it.
// Reading a skill grants nothing.
type Service struct {
	Roots Roots

	mu      sync.Mutex
	offered *Set
}

// Scan reads the roots now: the set the next generation would load.
func (s *Service) Scan() (Set, error) { return Scan(s.Roots) }

// Digests reads the roots now and returns each skill's body digest by id: what tells a
// skill written since an earlier reading.
func (s *Service) Digests() (map[string]string, error) {
	set, err := s.Scan()
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(set.Skills))
	for _, sk := range set.Skills {
		out[sk.ID] = sk.Digest
	}
	return out, nil
}

// Offer makes set the one offered: the set the generation that just started loaded.
func (s *Service) Offer(set Set) {
	s.mu.Lock()
	s.offered = &set
	s.mu.Unlock()
}

// Offered is the set the current generation loaded; before any generation has started,
// it is the set the first one will load, read now.
func (s *Service) Offered() (Set, error) {
	s.mu.Lock()
	offered := s.offered
	s.mu.Unlock()
	if offered != nil {
		return *offered, nil
	}
	return s.Scan()
}

// refusedID is a refusal as skills.index reports it.
type refusedID struct {
	ID     string `json:"id"`
	Root   string `json:"root"`
	Reason string `json:"reason"`
}

// listing is a set as skills.index reports it: ids, and refused ids with why.
type listing struct {
	IDs     []string    `json:"ids"`
	Refused []refusedID `json:"refused"`
}

func listingOf(set Set) listing {
	l := listing{IDs: make([]string, 0, len(set.Skills)), Refused: make([]refusedID, 0, len(set.Refused))}
	for _, sk := range set.Skills {
		l.IDs = append(l.IDs, sk.ID)
	}
	for _, r := range set.Refused {
		l.Refused = append(l.Refused, refusedID{r.ID, r.Root, r.Reason})
	}
	return l
}

// Index is the skills.index service: {ids, refused} of the set offered, and, when the
// roots hold another set now, that set as pending: {revision, ids, refused}, offered
// from the next generation.
func (s *Service) Index() host.Service {
	return host.ServiceFunc(func(ctx context.Context, req *host.Request) host.Outcome {
		var none struct{}
		if err := req.Decode(&none); err != nil {
			return host.Reply(host.Error(host.CodeInvalidRequest, "skills.index takes no parameters: %v", err))
		}
		offered, err := s.Offered()
		if err != nil {
			return host.Reply(host.Error(host.CodeInvalidRequest, "%v", err))
		}
		now, err := s.Scan()
		if err != nil {
			return host.Reply(host.Error(host.CodeInvalidRequest, "%v", err))
		}
		l := listingOf(offered)
		reply := map[string]any{"ids": l.IDs, "refused": l.Refused, "revision": offered.Revision}
		if pending := listingOf(now); now.Revision != offered.Revision || !slices.Equal(pending.Refused, l.Refused) {
			reply["pending"] = map[string]any{"revision": now.Revision, "ids": pending.IDs, "refused": pending.Refused,
				"note": "the skills as they are now; they are offered from the next generation"}
		}
		return host.Reply(host.OK(reply))
	})
}

// Load is the skills.load service: {id} → {id, body, digest}, of the set offered.
func (s *Service) Load() host.Service {
	return host.ServiceFunc(func(ctx context.Context, req *host.Request) host.Outcome {
		var p struct {
			ID string `json:"id"`
		}
		if err := req.Decode(&p); err != nil || p.ID == "" {
			return host.Reply(host.Error(host.CodeInvalidRequest, `skills.load takes {"id": "<skill id>"}`))
		}
		set, err := s.Offered()
		if err != nil {
			return host.Reply(host.Error(host.CodeInvalidRequest, "%v", err))
		}
		sk, ok := set.Lookup(p.ID)
		if !ok {
			return host.Reply(s.missing(set, p.ID))
		}
		body, err := Reread(sk)
		if errors.Is(err, ErrChanged) {
			return host.Reply(host.Error(CodeChanged, "skill %q: %v; what it holds now is offered from the next generation", sk.ID, err))
		}
		if err != nil {
			return host.Reply(host.Error(CodeChanged, "skill %q could not be read again: %v", sk.ID, err))
		}
		return host.Reply(host.OK(map[string]any{"id": sk.ID, "body": body, "digest": sk.Digest}))
	})
}

// missing is the refusal of a load of id, which the offered set does not hold: refused
// in that set, or in the roots as they are now, or not offered until the next generation.
func (s *Service) missing(offered Set, id string) wire.Reply {
	if r, refused := offered.Refusal(id); refused {
		return host.Error(CodeRefused, "skill %q (%s root) was refused: %s", r.ID, r.Root, r.Reason)
	}
	now, err := s.Scan()
	if err == nil {
		if r, refused := now.Refusal(id); refused {
			return host.Error(CodeRefused, "skill %q (%s root), written during this generation, is refused: %s", r.ID, r.Root, r.Reason)
		}
		if _, pending := now.Lookup(id); pending {
			return host.Error(CodeNotFound, "skill %q was written during this generation; it is offered from the next one", id)
		}
	}
	return host.Error(CodeNotFound, "no skill %q in the index; skills.index lists the ids", id)
}
