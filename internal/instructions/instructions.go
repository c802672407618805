// Package instructions assembles the runtime's instruction text from its named sources:
// kiln's own contract for the agent (how cells work, the host methods it may call, the
// skills it may load and the refused ones with why), the workspace's AGENTS.md when there
// is one, and any source configured by name and path.
package instructions

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/kilnrt/kiln/internal/regfile"
	"github.com/kilnrt/kiln/internal/skills"
	"github.com/kilnrt/kiln/internal/transcript"
	"github.com/kilnrt/kiln/internal/wire"
)

// Source names kiln gives.
const (
	ContractSource = "contract"
	AgentsSource   = "AGENTS.md"
	// OrientationSource is the text the agent adopted to orient itself
	// (orientation.adopt), rendered after every other source.
	OrientationSource = "orientation"
	// SessionSource is a session's own instructions: a file or a text given when the
	// session was created, or by kiln.toml's [sessions.NAME].
	SessionSource = "session"
)

// MaxSourceBytes bounds one source file: an instruction header is read on every request.
const MaxSourceBytes = 1 << 20

// Named is a configured source: a name and the file that holds its text, or the text
// itself when Path is "".
type Named struct {
	Name string
	Path string
	Text string
}

// CheckText refuses a source's text kiln cannot put in a header: over MaxSourceBytes,
// or not UTF-8.
func CheckText(text string) error {
	switch {
	case len(text) > MaxSourceBytes:
		return fmt.Errorf("instructions: %d bytes, over %d", len(text), MaxSourceBytes)
	case !utf8.ValidString(text):
		return errors.New("instructions: not valid UTF-8")
	}
	return nil
}

// ParseNamed reads NAME=PATH. NAME is an identifier other than the names kiln gives.
func ParseNamed(arg string) (Named, error) {
	name, path, ok := strings.Cut(arg, "=")
	switch {
	case !ok || path == "":
		return Named{}, fmt.Errorf("instructions %q: want NAME=PATH", arg)
	case !wire.ValidIdentifier(name):
		return Named{}, fmt.Errorf("instructions %q: the name is not 1..128 of [A-Za-z0-9_.-]", arg)
	case name == ContractSource || name == AgentsSource || name == OrientationSource || name == SessionSource ||
		name == transcript.JoinedSource:
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
	// Adopted are the sources the session adopted (orientation), rendered last.
	Adopted []transcript.Source
}

// Paths are the files the file-backed sources are read from, by source name: the
// workspace's AGENTS.md and each configured source's file.
func Paths(workspace string, extra []Named) map[string]string {
	paths := map[string]string{AgentsSource: filepath.Join(workspace, AgentsSource)}
	for _, n := range extra {
		if n.Path != "" {
			paths[n.Name] = n.Path
		}
	}
	return paths
}

// Reader reads the sources; it keeps what it last read of each file, and reads a file
// again only once its identity has changed (see fileStamp). Its zero value is ready to
// use; it is safe for concurrent use.
type Reader struct {
	mu       sync.Mutex
	files    map[string]cachedFile        // by path
	contract transcript.Source            // the contract last made
	texts    map[string]transcript.Source // the sources given as text, by name
	now      func() time.Time             // nil is time.Now; tests move it
}

// cachedFile is a file's source as read, with its identity then.
type cachedFile struct {
	stamp fileStamp
	text  string
	sum   string // the text's digest
}

// RacyWindow is how long after a file last changed its identity is not trusted: a
// change within the file system's timestamp granularity of the previous one may leave
// its identity as it was, so a file read that soon after a change is read again next
// time.
const RacyWindow = 2 * time.Second

// fileStamp is a file's identity: a file whose stamp is unchanged, and whose last change
// was RacyWindow before it was read, holds what was read.
type fileStamp struct {
	dev, ino, size int64
	mtime, ctime   int64 // Unix nanoseconds
}

func stampOf(st *syscall.Stat_t) fileStamp {
	return fileStamp{dev: int64(st.Dev), ino: int64(st.Ino), size: st.Size,
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}
}

// Sources reads the sources, in order: contract, AGENTS.md when the workspace has one,
// the configured ones, then the adopted ones. A configured source whose file is missing is an error, as is
// any file larger than MaxSourceBytes or not UTF-8.
func (r *Reader) Sources(cfg Config) ([]transcript.Source, error) {
	out := []transcript.Source{r.contractSource(Contract(cfg.Methods, cfg.Skills))}
	agents, err := r.file(AgentsSource, filepath.Join(cfg.Workspace, AgentsSource))
	switch {
	case err == nil:
		out = append(out, agents)
	case !errors.Is(err, fs.ErrNotExist):
		return nil, err
	}
	for _, n := range cfg.Extra {
		if n.Path == "" {
			if err := CheckText(n.Text); err != nil {
				return nil, fmt.Errorf("instructions %s: %w", n.Name, err)
			}
			out = append(out, r.textSource(n.Name, n.Text))
			continue
		}
		src, err := r.file(n.Name, n.Path)
		if err != nil {
			return nil, fmt.Errorf("instructions %s: %w", n.Name, err)
		}
		out = append(out, src)
	}
	return append(out, cfg.Adopted...), nil
}

// contractSource is the contract's source, its digest computed once for each text.
func (r *Reader) contractSource(text string) transcript.Source {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.contract.Text != text || r.contract.Digest == "" {
		r.contract = transcript.NewSource(ContractSource, text)
	}
	return r.contract
}

// textSource is a source given as text, its digest computed once for each text.
func (r *Reader) textSource(name, text string) transcript.Source {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.texts[name]; ok && c.Text == text {
		return c
	}
	if r.texts == nil {
		r.texts = map[string]transcript.Source{}
	}
	src := transcript.NewSource(name, text)
	r.texts[name] = src
	return src
}

// file is the source name read from path: what was read before while the file's stamp
// is unchanged (one stat), else the file read again.
func (r *Reader) file(name, path string) (transcript.Source, error) {
	info, err := os.Stat(path)
	if err != nil {
		return transcript.Source{}, err
	}
	r.mu.Lock()
	c, ok := r.files[path]
	r.mu.Unlock()
	if ok && c.stamp == stampOf(info.Sys().(*syscall.Stat_t)) {
		return transcript.Source{Name: name, Digest: c.sum, Text: c.text}, nil
	}
	readAt := time.Now()
	if r.now != nil {
		readAt = r.now()
	}
	text, stamp, err := readSource(path)
	if err != nil {
		return transcript.Source{}, err
	}
	src := transcript.NewSource(name, text)
	if changed := max(stamp.mtime, stamp.ctime); changed < readAt.Add(-RacyWindow).UnixNano() {
		r.mu.Lock()
		if r.files == nil {
			r.files = map[string]cachedFile{}
		}
		r.files[path] = cachedFile{stamp: stamp, text: text, sum: src.Digest}
		r.mu.Unlock()
	}
	return src, nil
}

// readSource reads the file at path, and its stamp as it was opened: a change while it
// is read changes the stamp after this one. It opens the file without waiting (a FIFO
// waits for a writer) and reads it only if it is a regular file.
func readSource(path string) (string, fileStamp, error) {
	f, err := regfile.Open(path, false)
	if err != nil {
		return "", fileStamp{}, err
	}
	defer f.Close()
	data, err := f.ReadAll(MaxSourceBytes)
	if err != nil {
		return "", fileStamp{}, err
	}
	if !utf8.Valid(data) {
		return "", fileStamp{}, fmt.Errorf("%s is not valid UTF-8", path)
	}
	return string(data), stampOf(f.Info.Sys().(*syscall.Stat_t)), nil
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
			fmt.Fprintf(&b, "- %q (%s root): %s\n", r.ID, r.Root, r.Reason) // a name a cell chose, quoted
		}
	}
	return b.String()
}
