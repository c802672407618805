package session

import (
	"context"
	"os"
	"sync"
	"testing"

	"github.com/kilnrt/kiln/internal/interp"
)

func TestPackagesCompileOncePerInterpreter(t *testing.T) {
	python, err := interp.Find(context.Background(), DefaultPython(os.Getenv))
	if err != nil {
		t.Skip(err)
	}
	var p Packages
	ctx := context.Background()
	first, err := p.installer(ctx, python.Path)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if in, err := p.installer(ctx, python.Path); err != nil || in != first {
				t.Errorf("a later session got %p, %v; want the first's %p", in, err, first)
			}
		})
	}
	wg.Wait()
	// Two sessions of one host share it, and their cells run.
	for i := range 2 {
		s, err := Open(ctx, Config{Packages: &p})
		if err != nil {
			t.Fatal(err)
		}
		if s.pkg != first {
			t.Errorf("session %d compiled a package of its own", i)
		}
		rec, err := s.Execute(ctx, "1+1", Watch{})
		s.Close()
		if err != nil || len(rec.Output) == 0 || rec.Output[0].Text != "2" {
			t.Fatalf("session %d: %+v %v", i, rec, err)
		}
	}
}

func TestAPackageThatDoesNotCompileIsTriedAgain(t *testing.T) {
	var p Packages
	for range 2 {
		if _, err := p.installer(context.Background(), "/bin/false"); err == nil {
			t.Fatal("a package compiled by /bin/false")
		}
		p.mu.Lock()
		kept := len(p.m)
		p.mu.Unlock()
		if kept != 0 {
			t.Fatalf("a failed compile is kept: %d entries", kept)
		}
	}
}
