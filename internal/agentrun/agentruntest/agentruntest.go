// Package agentruntest opens a session of a data directory and starts its agent, for
// the tests of what an agent does with a real worker and a test route.
package agentruntest

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kilnrt/kiln/internal/agentrun"
	"github.com/kilnrt/kiln/internal/session"
)

// Start opens the session of data directory dir (its workspace dir/ws) and starts its
// agent as dir's kiln.toml configures it; ends receives each turn's end, and stop
// stops both.
func Start(t testing.TB, dir string) (s *session.Session, ends chan agentrun.Progress, stop func()) {
	t.Helper()
	conf, err := agentrun.LoadConfig(filepath.Join(dir, "kiln.toml"), false)
	if err != nil {
		t.Fatal(err)
	}
	s, err = session.Open(t.Context(), session.Config{DataDir: dir, Workspace: filepath.Join(dir, "ws")})
	if err != nil {
		t.Fatal(err)
	}
	ends = make(chan agentrun.Progress, 8)
	ctx, cancel := context.WithCancel(t.Context())
	a, err := agentrun.Start(ctx, s, agentrun.Options{Config: conf, OnProgress: func(p agentrun.Progress) {
		if p.What == "end" {
			ends <- p
		}
	}})
	if err != nil {
		cancel()
		s.Close()
		t.Fatal(err)
	}
	return s, ends, func() {
		cancel()
		<-a.Done()
		s.Close()
	}
}
