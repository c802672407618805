package sandbox

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/proc"
	"github.com/kilnrt/kiln/internal/sandbox/escapetest"
)

// TestProbeOnStart starts a worker-like child (its own PID namespace and /proc) under
// the default profile through a host that probed no namespaces: the start makes them,
// the host learns from it what Probe's child finds, and what applied is named
// workspace, nothing being left out. Its cgroup lists the child while it lives.
func TestProbeOnStart(t *testing.T) {
	probed, py := needHost(t)
	h := ProbeOnStart(nil)
	if !h.unsure() {
		t.Fatal("a host made by ProbeOnStart is sure of its namespaces before any start")
	}
	w := escapetest.NewWorld(t)
	pol := Policy{Profile: Profile{Name: ProfileWorkspace, Default: true}, Work: w.Work,
		Hide: []string{w.Data}, Python: py}
	hold, held, err := os.Pipe() // the child lives until held is closed
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	p, applied, err := h.Start(t.Context(), pol, proc.Command{Path: py, Dir: w.Work, ExtraFiles: []*os.File{hold},
		Args: []string{"-I", "-c", "import os; os.read(3, 1)"}})
	if err != nil {
		held.Close()
		t.Fatalf("start: %v", err)
	}
	defer func() {
		held.Close()
		<-p.Exited()
		p.Release(0)
	}()
	if applied.Profile != ProfileWorkspace || !slices.Contains(applied.Namespaces, "pid") || len(applied.Missing) > 0 {
		t.Errorf("applied %+v; want workspace, in a PID namespace, nothing missing", applied)
	}
	if h.unsure() {
		t.Error("the host did not learn the namespaces from the start")
	}
	if got, want := h.Mechanisms(), probed.Mechanisms(); got.Namespaces != want.Namespaces || got.ProcMount != want.ProcMount {
		t.Errorf("learned %+v; the probe finds %+v", got, want)
	}
	if h.cgroups != nil {
		pids, ok := applied.Pids()
		if !ok || !slices.Contains(pids, p.Pid()) {
			t.Errorf("the cgroup's processes %v, %v; want the child's, %d", pids, ok, p.Pid())
		}
	}
}

// TestLearn is what a host that took namespaces as given learns from a start's
// outcome, and whether the start is to be made again.
func TestLearn(t *testing.T) {
	worker := spec{Mount: true, Proc: true}
	noProc := spec{Mount: true} // where the kernel is not known to mount a /proc

	refused := fmt.Errorf("%w: clone: operation not permitted", proc.ErrNamespaces)
	for _, c := range []struct {
		name            string
		s               spec
		applied         Applied
		err             error
		again           bool
		ns, procMount   bool
		nsSure, procSet bool
		why             string
	}{
		{"made", worker, Applied{Namespaces: []string{"user", "pid"}}, nil, false, true, true, true, true, ""},
		{"made without a /proc of its own", noProc, Applied{Namespaces: []string{"user"}}, nil, false, true, true, true, false, ""},
		{"clone refused", worker, Applied{}, refused, true, false, false, true, true, "clone: operation not permitted"},
		{"started without namespaces", noProc, Applied{Missing: []string{"namespaces: refused"}}, nil, true, false, false, true, true, "refused by the kernel"},
		{"tmpfs refused", worker, Applied{}, &viewError{msg: "a private /tmp: permission denied"}, true, false, false, true, true, "a private /tmp: permission denied"},
		{"proc refused", worker, Applied{}, &viewError{proc: true, msg: "mounting /proc: permission denied"}, true, true, false, false, true, "mounting /proc: permission denied"},
		{"another failure", worker, Applied{}, errors.New("landlock: restricting"), false, true, true, false, false, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := ProbeOnStart(nil)
			again := h.learn(c.s, c.applied, c.err)
			m := h.mechanisms()
			if again != c.again || m.Namespaces != c.ns || m.ProcMount != c.procMount || m.NamespacesErr != c.why {
				t.Errorf("again %v, %+v; want again %v, namespaces %v, /proc %v, why %q", again, m, c.again, c.ns, c.procMount, c.why)
			}
			if h.nsUnsure == c.nsSure || h.procUnsure == c.procSet {
				t.Errorf("unsure of namespaces %v, of /proc %v; want %v, %v", h.nsUnsure, h.procUnsure, !c.nsSure, !c.procSet)
			}
		})
	}
}

// TestViewErrorReport reads the helper's report of a mount refused in the child's
// namespaces as a viewError, /proc apart, and other errors as before.
func TestViewErrorReport(t *testing.T) {
	for _, c := range []struct {
		line string
		view bool
		proc bool
	}{
		{"error " + (&viewError{msg: "making mounts private: operation not permitted"}).report(), true, false},
		{"error " + (&viewError{proc: true, msg: "mounting /proc: operation not permitted"}).report(), true, true},
		{"error landlock: restricting: invalid argument", false, false},
	} {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		w.WriteString(c.line + "\n")
		w.Close()
		_, err = awaitReport(t.Context(), nil, r)
		r.Close()
		v, ok := errors.AsType[*viewError](err)
		if ok != c.view || ok && v.proc != c.proc || !errors.Is(err, ErrUnavailable) {
			t.Errorf("%q: %v; want a viewError %v (of /proc %v), ErrUnavailable", c.line, err, c.view, c.proc)
		}
		if ok && !strings.HasSuffix(err.Error(), strings.TrimPrefix(strings.TrimPrefix(c.line, "error "+reportView), "error "+reportProc)) {
			t.Errorf("%q: the error says %q", c.line, err)
		}
	}
}

// TestNoneReportsItsNamespaces starts children under none, contained and not: what
// Start reports applied names exactly the namespaces /proc shows the child apart in.
func TestNoneReportsItsNamespaces(t *testing.T) {
	t.Parallel()
	for _, contain := range []bool{true, false} {
		p, applied, err := (*Host)(nil).Start(t.Context(), Policy{}, proc.Command{Path: "/bin/sleep", Args: []string{"60"}, Contain: contain})
		if err != nil {
			t.Fatalf("start: %v", err)
		}
		apart, err := escapetest.Namespaces(p.Pid())
		p.Kill()
		<-p.Exited()
		<-p.Drained()
		p.Release(0)
		if err != nil {
			t.Fatal(err)
		}
		if contain && p.Namespaced() && len(apart) == 0 {
			t.Errorf("a namespaced child shares every namespace with the host")
		}
		if !slices.Equal(applied.Namespaces, apart) || applied.Profile != ProfileNone {
			t.Errorf("contain %v: applied %+v; the child is apart in %v", contain, applied, apart)
		}
	}
}
