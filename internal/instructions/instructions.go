// Package instructions assembles the runtime's instruction text from its named sources:
// kiln's own contract for the agent (how cells work, the host methods it may call, the
// skills it may load and the refused ones with why), the workspace's AGENTS.md when there
// is one, and any source configured by name and path.
package instructions

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/kilnrt/kiln/internal/skills"
	"github.com/kilnrt/kiln/internal/transcript"
	"github.com/kilnrt/kiln/internal/wire"
)

// Source names kiln gives.
const (
	ContractSource = "contract"
	AgentsSource   = "AGENTS.md"
)

// MaxSourceBytes bounds one source file: an instruction header is read on every request.
const MaxSourceBytes = 1 << 20

// Named is a configured source: a name and the file that holds its text.
type Named struct {
	Name string
	Path string
}

// ParseNamed reads NAME=PATH. NAME is an identifier other than the names kiln gives.
func ParseNamed(arg string) (Named, error) {
	name, path, ok := strings.Cut(arg, "=")
	switch {
	case !ok || path == "":
		return Named{}, fmt.Errorf("instructions %q: want NAME=PATH", arg)
	case !wire.ValidIdentifier(name):
		return Named{}, fmt.Errorf("instructions %q: the name is not 1..128 of [A-Za-z0-9_.-]", arg)
	case name == ContractSource || name == AgentsSource || name == transcript.JoinedSource:
		return Named{}, fmt.Errorf("instructions %q: %s is a name kiln gives", arg, name)
	}
	return Named{Name: name, Path: path}, nil
}

// Config is what the instruction text is made of.
type Config struct {
	Workspace string     // AGENTS.md is read from here
	Methods   []string   // the host methods a cell may call
	Skills    skills.Set // the skills offered, and the refused ones
	Extra     []Named    // configured sources, in order
}

// Paths are the files the file-backed sources are read from, by source name: the
// workspace's AGENTS.md and each configured source's file.
func Paths(workspace string, extra []Named) map[string]string {
	paths := map[string]string{AgentsSource: filepath.Join(workspace, AgentsSource)}
	for _, n := range extra {
		paths[n.Name] = n.Path
	}
	return paths
}

// Sources reads the sources, in order: contract, AGENTS.md when the workspace has one,
// then the configured ones. A configured source whose file is missing is an error, as is
// any file larger than MaxSourceBytes or not UTF-8.
func Sources(cfg Config) ([]transcript.Source, error) {
	out := []transcript.Source{transcript.NewSource(ContractSource, Contract(cfg.Methods, cfg.Skills))}
	agents, err := readSource(filepath.Join(cfg.Workspace, AgentsSource))
	switch {
	case err == nil:
		out = append(out, transcript.NewSource(AgentsSource, agents))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	for _, n := range cfg.Extra {
		text, err := readSource(n.Path)
		if err != nil {
			return nil, fmt.Errorf("instructions %s: %w", n.Name, err)
		}
		out = append(out, transcript.NewSource(n.Name, text))
	}
	return out, nil
}

func readSource(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, MaxSourceBytes+1))
	if err != nil {
		return "", fmt.Errorf("reading %s: %w", path, err)
	}
	if len(data) > MaxSourceBytes {
		return "", fmt.Errorf("%s is larger than %d bytes", path, MaxSourceBytes)
	}
	if !utf8.Valid(data) {
		return "", fmt.Errorf("%s is not valid UTF-8", path)
	}
	return string(data), nil
}

// Contract is kiln's own text for the agent, naming the host methods and skills.
func Contract(methods []string, set skills.Set) string {
	var b strings.Builder
	b.WriteString(`# How this runtime works

You act by writing Python cells. Every cell runs in one persistent namespace:
- the repr of a cell's final expression is its result, and _ keeps the last value;
- top-level await works, and tasks a cell starts keep running between cells;
- a cell returns at most 65,536 bytes of output; the excess is counted, not kept;
- an interrupted or killed cell says so; after a kill, a new generation starts with an
  empty namespace.

Call the host with await runtime.request(method, **params), or runtime's own methods.
A refusal raises runtime.HostError with a code and a message. Host methods:
`)
	for _, m := range methods {
		b.WriteString("- " + m + "\n")
	}
	b.WriteString("\nSkills: import kiln.skills.<id> gives the body as __doc__; await runtime.skills.load(id) reads it again.\n")
	if len(set.Skills) == 0 {
		b.WriteString("No skills are offered.\n")
	}
	for _, s := range set.Skills {
		b.WriteString("- " + s.ID + "\n")
	}
	if len(set.Refused) > 0 {
		b.WriteString("Refused skills, and why:\n")
		for _, r := range set.Refused {
			fmt.Fprintf(&b, "- %s (%s root): %s\n", r.ID, r.Root, r.Reason)
		}
	}
	return b.String()
}
