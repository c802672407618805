package session

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"

	kilnpy "github.com/kilnrt/kiln/python"
)

// Packages keeps the workers' Python package compiled for each interpreter, for the
// sessions of one host (a daemon): it is compiled at the first session of an
// interpreter, not at every open, and its bytes are held once. An interpreter file
// replaced meanwhile (another size, time or inode) is compiled for afresh. The zero
// value is ready to use. The host's sessions sweep stale scratch directories once,
// at the first.
type Packages struct {
	mu sync.Mutex
	m  map[interpreterFile]*compiled
	// swept is done once the scratch directories earlier hosts left were swept: at the
	// first session, not at every open.
	swept sync.Once
}

// interpreterFile names an interpreter's file as it is now.
type interpreterFile struct {
	path        string
	size, mtime int64
	dev, ino    uint64
}

// compiled is one interpreter's package, once ready is closed.
type compiled struct {
	ready chan struct{}
	in    *kilnpy.Installer
	err   error
}

// installer is the package compiled for the interpreter at path: compiled now if no
// session compiled it before, or if that compile failed.
func (p *Packages) installer(ctx context.Context, path string) (*kilnpy.Installer, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return nil, fmt.Errorf("kiln: interpreter %s: %w", path, &os.PathError{Op: "stat", Path: path, Err: err})
	}
	key := interpreterFile{path: path, size: st.Size, mtime: st.Mtim.Nano(), dev: uint64(st.Dev), ino: st.Ino}
	p.mu.Lock()
	c := p.m[key]
	owner := c == nil
	if owner {
		if p.m == nil {
			p.m = map[interpreterFile]*compiled{}
		}
		c = &compiled{ready: make(chan struct{})}
		p.m[key] = c
	}
	p.mu.Unlock()
	if owner {
		c.in, c.err = kilnpy.Precompiled(context.WithoutCancel(ctx), path, workerModules()...)
		if c.err != nil {
			p.mu.Lock()
			delete(p.m, key) // the next session tries again
			p.mu.Unlock()
		}
		close(c.ready)
	}
	select {
	case <-c.ready:
		return c.in, c.err
	case <-ctx.Done():
		return nil, fmt.Errorf("kiln: waiting for the Python package to compile: %w", ctx.Err())
	}
}
