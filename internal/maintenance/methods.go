package maintenance

import "github.com/kilnrt/kiln/internal/host"

// Parts are what the family's methods need of the session that serves them.
type Parts interface {
	// SkillDigests are the skills as they are now, by id and the digest of each body.
	SkillDigests() (map[string]string, error)
}

// Methods are the family's host request methods, built from the session's parts.
func Methods(p Parts) []host.Method {
	s := Service{Skills: p.SkillDigests}
	return []host.Method{
		{Name: OriginateMethod, Service: s.Originate()},
		{Name: AssessMethod, Service: s.Assess()},
	}
}
