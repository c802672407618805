package interp

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
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
