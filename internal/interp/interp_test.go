package interp

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestFindResolvesTheRealBinary(t *testing.T) {
	in, err := Find(context.Background(), "python3")
	if err != nil {
		t.Fatal(err)
	}
	if !filepath.IsAbs(in.Path) || !atLeast(in.Version, 3, 10) {
		t.Errorf("got %+v", in)
	}
	if fi, err := os.Stat(in.Path); err != nil || fi.IsDir() {
		t.Errorf("%s: %v", in.Path, err)
	}
}

func TestFindRefuses(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "python2")
	os.WriteFile(old, []byte("#!/bin/sh\necho /usr/bin/python2; echo cpython; echo 2.7.18; echo\n"), 0o700)
	broken := filepath.Join(dir, "broken")
	os.WriteFile(broken, []byte("#!/bin/sh\necho 'no python here' >&2; exit 1\n"), 0o700)
	for _, name := range []string{old, broken} {
		if _, err := Find(context.Background(), name); !errors.Is(err, ErrUnsupported) {
			t.Errorf("Find(%s): %v; want ErrUnsupported", filepath.Base(name), err)
		}
	}
	if _, err := Find(context.Background(), filepath.Join(dir, "missing")); err == nil {
		t.Error("Find of a missing file succeeded")
	}
}

// TestFindGivenUpIsNotARefusal checks that a probe the caller cancelled says so, and does
// not call the interpreter unsupported.
func TestFindGivenUpIsNotARefusal(t *testing.T) {
	script := filepath.Join(t.TempDir(), "python3")
	os.WriteFile(script, []byte("#!/bin/sh\nexec python3 \"$@\"\n"), 0o700)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Find(ctx, script)
	if !errors.Is(err, context.Canceled) || errors.Is(err, ErrUnsupported) {
		t.Errorf("got %v; want context.Canceled, not ErrUnsupported", err)
	}
}

func TestAtLeast(t *testing.T) {
	for _, c := range []struct {
		v    string
		want bool
	}{{"3.10.0", true}, {"3.9.18", false}, {"3.11.7", true}, {"4.0.0", true}, {"2.7.18", false}, {"x", false}, {"3", false}} {
		if got := atLeast(c.v, 3, 10); got != c.want {
			t.Errorf("atLeast(%q) = %v; want %v", c.v, got, c.want)
		}
	}
}

// fakePython writes an interpreter that answers the probe as CPython 3.12.1 whose
// executable is exe ("" for the path it was run by, as CPython says), and counts its runs
// in a file beside it.
func fakePython(t *testing.T, dir, name, exe string) (path string, runs func() int) {
	t.Helper()
	path = filepath.Join(dir, name)
	count := path + ".runs"
	if exe == "" {
		exe = `"$0"`
	}
	script := "#!/bin/sh\necho run >> " + count + "\necho " + exe + "; echo cpython; echo 3.12.1\n"
	if err := os.WriteFile(path, []byte(script), 0o700); err != nil {
		t.Fatal(err)
	}
	return path, func() int {
		data, _ := os.ReadFile(count)
		return strings.Count(string(data), "run")
	}
}

func TestFindKeepsWhatItLearnedInTheUserCache(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir := t.TempDir()
	self, selfRuns := fakePython(t, dir, "python-self", "")
	wrapper, wrapperRuns := fakePython(t, dir, "python-wrapper", "/usr/bin/true")
	link := filepath.Join(dir, "python-link")
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	find := func(name string) Interpreter {
		t.Helper()
		in, err := Find(context.Background(), name)
		if err != nil || in.Version != "3.12.1" {
			t.Fatalf("Find(%s): %+v %v", filepath.Base(name), in, err)
		}
		return in
	}
	find(self)
	if in := find(self); selfRuns() != 1 || in.Path != self {
		t.Errorf("second Find: %+v after %d probes; want %s from the cache, 1 probe", in, selfRuns(), self)
	}
	// A link is its own key, as a virtual environment's python must be.
	if in := find(link); selfRuns() != 2 || in.Path != link {
		t.Errorf("Find through a link: %+v after %d probes; want %s, probed", in, selfRuns(), link)
	}
	if in := find(link); selfRuns() != 2 || in.Path != link {
		t.Errorf("Find through the link again: %+v after %d probes; want the cache's answer", in, selfRuns())
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(self, later, later); err != nil {
		t.Fatal(err)
	}
	find(self)
	if selfRuns() != 3 {
		t.Errorf("after the file changed: %d probes; want a new one", selfRuns())
	}
	find(wrapper)
	find(wrapper)
	if wrapperRuns() != 2 {
		t.Errorf("a wrapper: %d probes; want one a Find", wrapperRuns())
	}
}

// TestFindRefusesWhatStandsInTheCacheEntrysPlace puts what a program run as the user
// could leave in the user cache where Find's entry goes: a FIFO, which a plain open
// waits on for ever. Find probes again, at once.
func TestFindRefusesWhatStandsInTheCacheEntrysPlace(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	self, runs := fakePython(t, t.TempDir(), "python-self", "")
	abs, err := filepath.Abs(self)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(abs)
	if err != nil {
		t.Fatal(err)
	}
	file, err := cacheKey{Path: abs, Size: fi.Size(), ModTime: fi.ModTime().UnixNano()}.file()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		t.Fatal(err)
	}
	spoils := map[string]func() error{
		"a FIFO": func() error { return syscall.Mkfifo(file, 0o600) },
	}
	for name, spoil := range spoils {
		t.Run(name, func(t *testing.T) {
			os.Remove(file)
			if err := spoil(); err != nil {
				t.Fatal(err)
			}
			before := runs()
			type found struct {
				in  Interpreter
				err error
			}
			done := make(chan found, 1)
			go func() {
				in, err := Find(context.Background(), self)
				done <- found{in, err}
			}()
			select {
			case f := <-done:
				if f.err != nil || f.in.Version != "3.12.1" || runs() != before+1 {
					t.Errorf("Find: %+v %v after %d probes; want 3.12.1, probed once", f.in, f.err, runs()-before)
				}
			case <-time.After(10 * time.Second):
				// Free the open that waits for a writer, so that the test ends.
				if w, err := os.OpenFile(file, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				<-done
				t.Errorf("Find still waited on the cache entry after 10 s")
			}
		})
	}
}

func TestFindTwiceWithTheRealInterpreter(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	first, err := Find(context.Background(), "python3")
	if err != nil {
		t.Fatal(err)
	}
	second, err := Find(context.Background(), "python3")
	if err != nil || second != first {
		t.Errorf("got %+v %v; want %+v again", second, err, first)
	}
}

// TestFindNamesAWrapperAndKeepsWhatItRuns: a wrapper, as a version manager's shim, is
// named as such beside the interpreter it runs, and that interpreter, named itself
// next, is found without a probe.
func TestFindNamesAWrapperAndKeepsWhatItRuns(t *testing.T) {
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	dir := t.TempDir()
	self, selfRuns := fakePython(t, dir, "python-self", "")
	shim := filepath.Join(dir, "python-shim")
	if err := os.WriteFile(shim, []byte("#!/bin/sh\nexec "+self+" \"$@\"\n"), 0o700); err != nil {
		t.Fatal(err)
	}
	in, err := Find(context.Background(), shim)
	if err != nil || in.Path != self || in.Wrapper != shim {
		t.Fatalf("Find(shim) = %+v, %v; want %s through the wrapper %s", in, err, self, shim)
	}
	in, err = Find(context.Background(), self)
	if err != nil || in.Path != self || in.Wrapper != "" || selfRuns() != 1 {
		t.Errorf("Find(what the shim runs) = %+v, %v after %d probes; want it from the cache, no wrapper", in, err, selfRuns())
	}
	if _, err := Find(context.Background(), shim); err != nil || selfRuns() != 2 {
		t.Errorf("Find(shim) again: %v after %d probes; want the wrapper run again", err, selfRuns())
	}
}
