package serve

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-json-experiment/json"

	"github.com/kilnrt/kiln/internal/limits"
	"github.com/kilnrt/kiln/internal/store"
)

// stateDir is where the daemon keeps one file per session it holds, under the data
// directory.
const stateDir = "serve/sessions"

// Session states.
const (
	StateOpen    = "open"    // the daemon holds it; its next cell runs
	StateStopped = "stopped" // stopped by a client or idle past its timeout
)

// Config is how a session is opened: what a client asked for at creation.
type Config struct {
	ID     string            `json:"id"`
	Python string            `json:"python,omitempty"` // interpreter; default the daemon's
	Cwd    string            `json:"cwd,omitempty"`    // the worker's directory; default the daemon's workspace
	Env    map[string]string `json:"env,omitempty"`    // set over the daemon's environment
	Limits limits.Session    `json:"limits,omitzero"`
	// MCP are the MCP servers whose tools the session's cells call; see MCPServer.
	MCP []MCPServer `json:"mcp,omitempty"`
	// Route names the kiln.toml route of the session's agent; "" is the daemon's [agent]
	// route. A daemon that runs no agent refuses it.
	Route string `json:"route,omitempty"`
	// Instructions is the text of the session's own instruction source, rendered after
	// the workspace's; InstructionsFile names a file that holds it instead (relative to
	// the daemon's workspace). kiln.toml's [sessions.ID] gives both defaults.
	Instructions     string `json:"instructions,omitempty"`
	InstructionsFile string `json:"instructions_file,omitempty"`
	// Sandbox is the profile that confines the session's workers and workspace
	// commands (workspace, strict or none, the first two optionally ":best-effort"),
	// and Network what they may reach (host, none, or TCP ports "80,443"); "" takes
	// the daemon's. A profile the kernel cannot give fails the session's opening.
	Sandbox string `json:"sandbox,omitempty"`
	Network string `json:"network,omitempty"`
}

// state is what the daemon records of a session it holds, so that a restart lists it
// again.
type state struct {
	Config     Config     `json:"config"`
	State      string     `json:"state"`
	CreatedAt  time.Time  `json:"created_at"`
	StoppedAt  *time.Time `json:"stopped_at,omitempty"`
	StopReason string     `json:"stop_reason,omitempty"`
	Dir        string     `json:"dir,omitempty"` // where its cells run, once its runtime started
}

// states reads and writes the session files of one data directory; with no directory,
// a guest's, it keeps none. On a record daemons share (rec set), it keeps the sessions
// in the record instead, for every daemon to read.
type states struct {
	dir string
	rec *store.Store
}

func (s states) path(id string) string { return filepath.Join(s.dir, id+".json") }

// save writes st whole, replacing the earlier file at once.
func (s states) save(st state) error {
	if s.dir == "" && s.rec == nil {
		return nil
	}
	data, err := json.Marshal(st, json.Deterministic(true))
	if err != nil {
		return fmt.Errorf("serve: session %s: %w", st.Config.ID, err)
	}
	if s.rec != nil {
		return s.rec.SaveDaemonSession(context.Background(), st.Config.ID, data)
	}
	tmp, err := os.CreateTemp(s.dir, ".session-*")
	if err != nil {
		return fmt.Errorf("serve: session %s: %w", st.Config.ID, err)
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), s.path(st.Config.ID))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("serve: session %s: %w", st.Config.ID, err)
	}
	return nil
}

// remove forgets session id.
func (s states) remove(id string) error {
	if s.rec != nil {
		return s.rec.RemoveDaemonSession(context.Background(), id)
	}
	if s.dir == "" {
		return nil
	}
	if err := os.Remove(s.path(id)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("serve: session %s: %w", id, err)
	}
	return nil
}

// load reads every session file; one that cannot be read is reported and skipped.
func (s states) load() ([]state, []error) {
	if s.rec != nil {
		return s.loadRecord()
	}
	if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, []error{fmt.Errorf("serve: sessions: %w", err)}
	}
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, []error{fmt.Errorf("serve: sessions: %w", err)}
	}
	var out []state
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if strings.HasPrefix(name, ".session-") { // a save cut short: its session's file is whole
			os.Remove(filepath.Join(s.dir, name))
			continue
		}
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(s.dir, name))
		var st state
		if err == nil {
			err = json.Unmarshal(data, &st)
		}
		if err == nil && st.Config.ID+".json" != name {
			err = fmt.Errorf("names session %q", st.Config.ID)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("serve: session file %s: %w", name, err))
			continue
		}
		out = append(out, st)
	}
	return out, errs
}

// loadRecord reads every session the shared record holds; one that cannot be read is
// reported and skipped.
func (s states) loadRecord() ([]state, []error) {
	all, err := s.rec.DaemonSessions(context.Background())
	if err != nil {
		return nil, []error{fmt.Errorf("serve: sessions: %w", err)}
	}
	var out []state
	var errs []error
	for _, r := range all {
		var st state
		if err := json.Unmarshal(r.State, &st); err != nil {
			errs = append(errs, fmt.Errorf("serve: session %s in the record: %w", r.Name, err))
			continue
		}
		out = append(out, st)
	}
	return out, errs
}
