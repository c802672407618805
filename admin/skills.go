package admin

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"github.com/kilnrt/kiln/internal/skills"
	"github.com/kilnrt/kiln/internal/wire"
)

// SkillsEnv is the environment variable that names the builtin skills root.
const SkillsEnv = skills.EnvBuiltin

// MaxSkillBytes bounds a SKILL.md: a larger one is refused.
const MaxSkillBytes = skills.MaxBodyBytes

// The roots a skill comes from, as a Skill or SkillRefusal names its own.
const (
	SkillRootBuiltin = skills.RootBuiltin
	SkillRootManaged = skills.RootManaged
)

// ValidIdentifier says whether s is a protocol identifier, 1..128 of [A-Za-z0-9_.-]:
// what a session name and a skill id must be.
func ValidIdentifier(s string) bool { return wire.ValidIdentifier(s) }

// SkillRoots are the two directories skills come from, one namespace: neither takes
// precedence, and an id defined in both is refused in both. A root that does not exist
// holds no skills.
type SkillRoots struct {
	Builtin string `json:"builtin"` // the workspace's or $KILN_SKILLS_DIR: skills that come with the work
	Managed string `json:"managed"` // <data>/skills: skills written by kiln skills new and by the agent
}

// DefaultSkillRoots are the roots a workbench of dataDir and workspace loads: the
// builtin root $KILN_SKILLS_DIR, else <workspace>/skills, and the managed root
// <dataDir>/skills. An empty workspace is the working directory.
func DefaultSkillRoots(dataDir, workspace string) (SkillRoots, error) {
	if workspace == "" {
		wd, err := os.Getwd()
		if err != nil {
			return SkillRoots{}, fmt.Errorf("kiln: workspace: %w", err)
		}
		workspace = wd
	}
	workspace, err := filepath.Abs(workspace)
	if err != nil {
		return SkillRoots{}, fmt.Errorf("kiln: workspace: %w", err)
	}
	return SkillRoots{Builtin: skills.BuiltinRoot(os.Getenv, workspace), Managed: ManagedSkillsRoot(dataDir)}, nil
}

// ManagedSkillsRoot is the managed skills root of the data directory dataDir: where
// kiln skills new and the agent write skills.
func ManagedSkillsRoot(dataDir string) string { return skills.ManagedRoot(dataDir) }

// Skill is one valid skill: a directory holding SKILL.md whose first non-empty line is
// "# <id>", <id> being the directory's name.
type Skill struct {
	// ID is the skill's id, its directory's name and its title.
	ID string `json:"id"`
	// Root is the root the skill is in, SkillRootBuiltin or SkillRootManaged.
	Root string `json:"root"`
	// Path is its SKILL.md.
	Path string `json:"path"`
	// Digest is the SHA-256 of the body, in hex.
	Digest string `json:"digest"`
	// Body is the text of SKILL.md, which a cell's import kiln.skills.<id> gives as the
	// module's __doc__. It is left out of JSON, which lists skills.
	Body string `json:"-"`
}

// SkillRefusal is a skill directory that is not offered, and why: an id defined in both
// roots, a title that disagrees with its directory, a SKILL.md that is not UTF-8 or is
// larger than MaxSkillBytes, a symlinked directory or SKILL.md.
type SkillRefusal struct {
	ID     string `json:"id"`     // the directory's name
	Root   string `json:"root"`   // SkillRootBuiltin or SkillRootManaged
	Path   string `json:"path"`   // the directory, or its SKILL.md
	Reason string `json:"reason"` // why it is refused
}

// SkillSet is the skills of both roots as a workbench generation loads them.
type SkillSet struct {
	// Revision is a digest of the valid set (ids and body digests): it changes exactly
	// when what a generation loads changes, and a generation's hello echoes it.
	Revision string `json:"revision"`
	// Skills are the valid skills, sorted by id.
	Skills []Skill `json:"skills"`
	// Refused are the refused ones, sorted by id and root.
	Refused []SkillRefusal `json:"refused"`
}

// Lookup is the valid skill id of the set.
func (s SkillSet) Lookup(id string) (Skill, bool) {
	if i := slices.IndexFunc(s.Skills, func(sk Skill) bool { return sk.ID == id }); i >= 0 {
		return s.Skills[i], true
	}
	return Skill{}, false
}

// Refusal is the first refusal of id, builtin root first.
func (s SkillSet) Refusal(id string) (SkillRefusal, bool) {
	if i := slices.IndexFunc(s.Refused, func(r SkillRefusal) bool { return r.ID == id }); i >= 0 {
		return s.Refused[i], true
	}
	return SkillRefusal{}, false
}

// ScanSkills reads both roots now: the set the next workbench generation loads. A root
// that cannot be read is an error.
func ScanSkills(roots SkillRoots) (SkillSet, error) {
	set, err := skills.Scan(skills.Roots(roots))
	if err != nil {
		return SkillSet{}, err
	}
	out := SkillSet{Revision: set.Revision, Skills: make([]Skill, len(set.Skills)), Refused: make([]SkillRefusal, len(set.Refused))}
	for i, sk := range set.Skills {
		out.Skills[i] = Skill(sk)
	}
	for i, r := range set.Refused {
		out.Refused[i] = SkillRefusal(r)
	}
	return out, nil
}

// NewSkill makes the skill id in root (made if need be) from a template titled
// "# <id>", and returns its SKILL.md. An id that is not an identifier, or a directory
// that exists, is refused. The next workbench generation loads it.
func NewSkill(root, id string) (string, error) { return skills.Create(root, id) }
