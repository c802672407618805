// Package skills finds the skills an agent may load, validates them, and serves them.
//
// A skill is a directory holding SKILL.md whose first non-empty line is "# <id>", where
// <id> is the directory's name and a protocol identifier. Two roots form one namespace,
// neither taking precedence: the builtin root (KILN_SKILLS_DIR, default
// <workspace>/skills, which may be absent) and the managed root (<data>/skills). What
// fails a rule is refused, never repaired, and the refusal says why, so an agent that
// wrote a skill learns why it was not offered.
package skills

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/regfile"
	"github.com/kilnrt/kiln/internal/textcut"
	"github.com/kilnrt/kiln/internal/wire"
)

// FileName is the file that makes a directory a skill.
const FileName = "SKILL.md"

// MaxBodyBytes bounds a SKILL.md: a skill is a trail of moves and receipts to follow, and
// every generation carries the whole set, so 256 KiB is ample and keeps a start cheap.
const MaxBodyBytes = 256 << 10

// Bounds of one root, which every generation reads and carries whole. Past them, one
// refusal says what was left unread.
const (
	MaxRootDirs  = 128     // directories read as skills
	MaxRootBytes = 4 << 20 // the bodies of its skills
)

// The two roots, as a skill or refusal names its own.
const (
	RootBuiltin = "builtin"
	RootManaged = "managed"
)

// Roots are the two directories skills come from. An empty or absent root holds none.
type Roots struct {
	Builtin string
	Managed string
}

// EnvBuiltin names the environment variable that sets the builtin root.
const EnvBuiltin = "KILN_SKILLS_DIR"

// BuiltinRoot is the builtin root for workspace: $KILN_SKILLS_DIR as getenv reads it,
// else <workspace>/skills.
func BuiltinRoot(getenv func(string) string, workspace string) string {
	if dir := getenv(EnvBuiltin); dir != "" {
		return dir
	}
	return filepath.Join(workspace, "skills")
}

// ManagedRoot is the managed root of the data directory dataDir.
func ManagedRoot(dataDir string) string { return filepath.Join(dataDir, "skills") }

// Skill is one validated skill.
type Skill struct {
	ID     string `json:"id"`
	Root   string `json:"root"`   // RootBuiltin or RootManaged
	Path   string `json:"path"`   // its SKILL.md
	Digest string `json:"digest"` // SHA-256 of the body, hex
	Body   string `json:"body"`
}

// Refusal is a skill directory that was not offered, and why.
type Refusal struct {
	ID     string `json:"id"`
	Root   string `json:"root"`
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// Set is the validated skills of both roots, sorted by id, the refusals, sorted by id
// and root, and the set's revision.
type Set struct {
	Skills  []Skill
	Refused []Refusal
	// Revision is a digest of the validated set (ids and body digests): it changes
	// exactly when what a generation would load changes. It is a protocol identifier.
	Revision string
}

// BothRoots is the reason every copy of an id defined in both roots is refused.
const BothRoots = "the id is defined in both the builtin and the managed root; neither takes precedence"

// Scan reads both roots. A root that does not exist holds no skills; one that cannot be
// read is an error. An id defined in both roots is refused in both, whatever either
// copy holds, valid or not.
func Scan(roots Roots) (Set, error) {
	var set Set
	var found [2][]Skill
	var refused [2][]Refusal
	inRoot := [2]map[string]bool{{}, {}}
	for i, root := range []struct{ name, dir string }{{RootBuiltin, roots.Builtin}, {RootManaged, roots.Managed}} {
		var err error
		if found[i], refused[i], err = scanRoot(root.name, root.dir); err != nil {
			return Set{}, err
		}
		for _, s := range found[i] {
			inRoot[i][s.ID] = true
		}
		for _, r := range refused[i] {
			inRoot[i][r.ID] = true
		}
	}
	both := func(id string) bool { return inRoot[0][id] && inRoot[1][id] }
	for i := range found {
		for _, s := range found[i] {
			if both(s.ID) {
				set.Refused = append(set.Refused, Refusal{ID: s.ID, Root: s.Root, Path: s.Path, Reason: BothRoots})
			} else {
				set.Skills = append(set.Skills, s)
			}
		}
		for _, r := range refused[i] {
			if both(r.ID) {
				r.Reason = BothRoots + "; this copy is refused besides: " + r.Reason
			}
			set.Refused = append(set.Refused, r)
		}
	}
	slices.SortFunc(set.Skills, func(a, b Skill) int { return strings.Compare(a.ID, b.ID) })
	slices.SortFunc(set.Refused, func(a, b Refusal) int {
		if c := strings.Compare(a.ID, b.ID); c != 0 {
			return c
		}
		return strings.Compare(a.Root, b.Root)
	})
	set.Revision = revision(set.Skills)
	return set, nil
}

// revision digests the ids and body digests of skills, in id order.
func revision(skills []Skill) string {
	h := sha256.New()
	for _, s := range skills {
		fmt.Fprintf(h, "%s %s\n", s.ID, s.Digest)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// scanRoot reads one root's skill directories.
func scanRoot(root, dir string) ([]Skill, []Refusal, error) {
	if dir == "" {
		return nil, nil, nil
	}
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("skills: %s root: %w", root, err)
	}
	var skills []Skill
	var refused []Refusal
	dirs, held := 0, 0
	for i, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		refuse := func(reason string) {
			// A name that is not UTF-8 is recorded and shown as text all the same.
			refused = append(refused, Refusal{ID: strings.ToValidUTF8(name, "\uFFFD"), Root: root,
				Path: strings.ToValidUTF8(path, "\uFFFD"), Reason: reason})
		}
		past := func() { // the root's bound: this entry and the rest are not offered
			refuse(fmt.Sprintf("the root holds more than %d directories or %d bytes of skills: this one and the %d entries after it are not offered",
				MaxRootDirs, MaxRootBytes, len(entries)-i-1))
		}
		if e.IsDir() || e.Type()&fs.ModeSymlink != 0 {
			dirs++
		}
		if dirs > MaxRootDirs {
			past()
			break
		}
		switch {
		case name == ".git":
			continue // the root's own version control, never a skill
		case e.Type()&fs.ModeSymlink != 0:
			refuse("the skill directory is a symlink; a skill must be a real directory in its root")
		case !e.IsDir():
			continue // a file beside the skills: not a skill
		case strings.HasPrefix(name, "."):
			refuse("the directory name starts with a dot; a hidden directory is not offered as a skill")
		case !wire.ValidIdentifier(name):
			refuse("the directory name is not an identifier (1..128 of [A-Za-z0-9_.-])")
		default:
			s, reason, err := readSkill(root, path, name)
			if err != nil {
				return nil, nil, err
			}
			if reason != "" {
				refuse(reason)
				continue
			}
			if held += len(s.Body); held > MaxRootBytes {
				past()
				return skills, refused, nil
			}
			skills = append(skills, s)
		}
	}
	return skills, refused, nil
}

// readSkill reads and validates the skill directory dir named id; a rule it breaks is
// returned as a reason.
func readSkill(root, dir, id string) (Skill, string, error) {
	path := filepath.Join(dir, FileName)
	info, err := os.Lstat(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return Skill{}, "the directory holds no " + FileName, nil
	case err != nil:
		return Skill{}, "", fmt.Errorf("skills: %w", err)
	case info.Mode()&fs.ModeSymlink != 0:
		return Skill{}, FileName + " is a symlink; it must be a regular file", nil
	case !info.Mode().IsRegular():
		return Skill{}, FileName + " is not a regular file", nil
	}
	body, reason, err := readBody(path)
	if err != nil || reason != "" {
		return Skill{}, reason, err
	}
	if title := firstLine(body); title != "# "+id {
		return Skill{}, fmt.Sprintf("the title %q disagrees with the directory: the first non-empty line must be %q",
			textcut.Ellipsis(title, 80), "# "+id), nil
	}
	sum := sha256.Sum256(body)
	return Skill{ID: id, Root: root, Path: path, Digest: hex.EncodeToString(sum[:]), Body: string(body)}, "", nil
}

// readBody reads a SKILL.md of at most MaxBodyBytes of UTF-8. It opens the file without
// following a symlink or waiting (a FIFO waits for a writer), and reads it only if it is
// a regular file: what was checked before may have been swapped since.
func readBody(path string) ([]byte, string, error) {
	f, err := regfile.Open(path, true)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, FileName + " is a symlink; it must be a regular file", nil
	case errors.Is(err, regfile.ErrNotRegular):
		return nil, FileName + " is not a regular file", nil
	case err != nil:
		return nil, "", fmt.Errorf("skills: %w", err)
	}
	defer f.Close()
	body, err := f.ReadAll(MaxBodyBytes)
	switch {
	case errors.Is(err, regfile.ErrTooLarge):
		return nil, fmt.Sprintf("%s is larger than %d bytes", FileName, MaxBodyBytes), nil
	case err != nil:
		return nil, "", fmt.Errorf("skills: %w", err)
	case !utf8.Valid(body):
		return nil, FileName + " is not valid UTF-8", nil
	}
	return body, "", nil
}

// firstLine is the first line of body that is not blank, without its line ending.
func firstLine(body []byte) string {
	for line := range bytes.Lines(body) {
		if t := bytes.TrimRight(line, "\r\n"); len(bytes.TrimSpace(t)) > 0 {
			return string(t)
		}
	}
	return ""
}

// Lookup returns the skill id of the set.
func (s Set) Lookup(id string) (Skill, bool) {
	i, found := slices.BinarySearchFunc(s.Skills, id, func(sk Skill, id string) int { return strings.Compare(sk.ID, id) })
	if !found {
		return Skill{}, false
	}
	return s.Skills[i], true
}

// Refusal returns the first refusal of id, in root order.
func (s Set) Refusal(id string) (Refusal, bool) {
	for _, r := range s.Refused {
		if r.ID == id {
			return r, true
		}
	}
	return Refusal{}, false
}

// Payload is the set as a workbench generation loads it, as JSON: its revision, each
// skill's id and body, and each refused id with its root and reason, so that importing
// a refused id says why it was refused.
func (s Set) Payload() ([]byte, error) {
	type entry struct {
		ID   string `json:"id"`
		Body string `json:"body"`
	}
	type refusal struct {
		ID     string `json:"id"`
		Root   string `json:"root"`
		Reason string `json:"reason"`
	}
	p := struct {
		Revision string    `json:"revision"`
		Skills   []entry   `json:"skills"`
		Refused  []refusal `json:"refused"`
	}{Revision: s.Revision, Skills: []entry{}, Refused: []refusal{}}
	for _, sk := range s.Skills {
		p.Skills = append(p.Skills, entry{sk.ID, sk.Body})
	}
	for _, r := range s.Refused {
		p.Refused = append(p.Refused, refusal{r.ID, r.Root, r.Reason})
	}
	out, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("skills: payload: %w", err)
	}
	return out, nil
}

// ErrChanged is a skill whose file no longer holds the body that was indexed.
var ErrChanged = errors.New("skills: changed since it was indexed")

// Reread reads sk's file again and returns its body if it still has sk's digest;
// otherwise an error wrapping ErrChanged (or the read's own error).
func Reread(sk Skill) (string, error) {
	body, reason, err := readBody(sk.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %s is gone", ErrChanged, sk.Path)
	}
	if err != nil {
		return "", err
	}
	if reason != "" {
		return "", fmt.Errorf("%w: %s", ErrChanged, reason)
	}
	if sum := sha256.Sum256(body); hex.EncodeToString(sum[:]) != sk.Digest {
		return "", fmt.Errorf("%w: its bytes differ from the digest %s", ErrChanged, sk.Digest)
	}
	return string(body), nil
}

// Template is the body of a new skill id: its title and a first outline to replace.
func Template(id string) string {
	return "# " + id + `

What this skill is for, in a sentence: the state it reaches and when an agent needs it.

## Moves

1. The first step, as code or a command an agent runs, and what it should see.
2. The next step.

## Receipts

How to tell it worked: the output, file or record that proves it.

## Refusals

What goes wrong, what the error says, and what to do instead.
`
}

// Create makes the skill id in root (created if need be) from Template, refusing an id
// that is not an identifier or a directory that exists. It returns the SKILL.md path.
func Create(root, id string) (string, error) {
	if !wire.ValidIdentifier(id) {
		return "", fmt.Errorf("skills: %q is not an identifier (1..128 of [A-Za-z0-9_.-])", id)
	}
	if err := os.MkdirAll(root, 0o700); err != nil {
		return "", fmt.Errorf("skills: managed root: %w", err)
	}
	dir := filepath.Join(root, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("skills: %s already exists", dir)
		}
		return "", fmt.Errorf("skills: %w", err)
	}
	path := filepath.Join(dir, FileName)
	if err := os.WriteFile(path, []byte(Template(id)), 0o600); err != nil {
		return "", fmt.Errorf("skills: %w", err)
	}
	return path, nil
}
