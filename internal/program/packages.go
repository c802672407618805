package program

import (
	"context"
	"sync"
)

// packages is the Python packages' archive, made when a child first needs it and kept
// for every child after. A making that fails is not kept: the next child that needs
// the archive starts another.
type packages struct {
	make func() ([]byte, error)

	mu     sync.Mutex
	data   []byte        // the archive, once made
	making chan struct{} // closed when the making under way ends; nil when none is
	err    error         // why the last making failed
}

// get returns the archive, made by the making under way or by one it starts (counted in
// wg), or ctx's cause if ctx ends first. The making goes on without it.
func (p *packages) get(ctx context.Context, wg *sync.WaitGroup) ([]byte, error) {
	p.mu.Lock()
	if p.data != nil {
		p.mu.Unlock()
		return p.data, nil
	}
	if p.making == nil {
		p.making = make(chan struct{})
		wg.Add(1)
		go p.run(p.making, wg)
	}
	making := p.making
	p.mu.Unlock()
	select {
	case <-making:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.data != nil {
		return p.data, nil
	}
	return nil, p.err
}

// run makes the archive and reports the making's end on done.
func (p *packages) run(done chan struct{}, wg *sync.WaitGroup) {
	defer wg.Done()
	data, err := p.make()
	p.mu.Lock()
	p.data, p.err, p.making = data, err, nil
	p.mu.Unlock()
	close(done)
}
