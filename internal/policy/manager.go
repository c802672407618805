package policy

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/release"
	"github.com/kilnrt/kiln/internal/store"
)

// ErrInvalidRelease is an activation candidate that is not a stored, intact release.
var ErrInvalidRelease = errors.New("policy: not a valid release")

// Manager keeps the policy the database's behavior epoch names, and the policy each
// running cell pinned when it started: a cell's hooks all use one release, even while
// an activation happens.
type Manager struct {
	store   *store.Store
	dataDir string // where releases live; "" means none can be activated
	base    Config // Python, Package, SessionID, Logger

	activating chan struct{} // held by the one activation running

	mu     sync.Mutex
	active *Policy
	epoch  int64
	pins   map[string]*Policy // cell id → its policy
	uses   map[*Policy]int    // cells pinning each policy
}

// NewManager follows the policy the database's epoch names. A stored release that is
// refused when it loads does not fail the manager: its decisions fall back, saying why.
func NewManager(ctx context.Context, st *store.Store, dataDir string, base Config) (*Manager, error) {
	m := &Manager{store: st, dataDir: dataDir, base: base, activating: make(chan struct{}, 1),
		pins: map[string]*Policy{}, uses: map[*Policy]int{}}
	b, err := st.Behavior(ctx)
	if err != nil {
		return nil, err
	}
	m.active, m.epoch = New(m.config(b.ReleaseID)), b.Epoch
	m.active.epoch = b.Epoch
	return m, nil
}

// config is the Config of the release id: kiln's initial one, or one stored under the
// data directory.
func (m *Manager) config(id string) Config {
	cfg := m.base
	cfg.DataDir, cfg.ReleaseID = m.dataDir, id
	return cfg
}

// Follow follows an activation made elsewhere (another kiln process): when b, the
// database's behavior row as read, has an epoch other than the active policy's, the
// release it names becomes the active policy.
func (m *Manager) Follow(b store.Behavior) {
	m.mu.Lock()
	current := m.epoch
	m.mu.Unlock()
	if b.Epoch == current {
		return
	}
	m.install(New(m.config(b.ReleaseID)), b.Epoch)
}

// install makes p the active policy at epoch, retiring the old one once no cell pins it.
func (m *Manager) install(p *Policy, epoch int64) {
	m.mu.Lock()
	old := m.active
	if epoch <= m.epoch {
		m.mu.Unlock()
		p.Close() // a newer activation won meanwhile
		return
	}
	p.epoch = epoch
	m.active, m.epoch = p, epoch
	retire := m.uses[old] == 0
	m.mu.Unlock()
	if retire {
		old.Close()
	}
}

// Activate validates the release at path (it must be <data>/releases/<identity>),
// starts its hooks worker through the handshake, and only then moves the database's
// epoch from expected: a stale expectation changes nothing (store.ErrStaleEpoch), and a
// release that does not load never becomes active. One activation runs at a time; the
// next waits for it, and one whose expectation is stale by then is refused before any
// hooks worker starts.
func (m *Manager) Activate(ctx context.Context, path string, expected int64) (store.Behavior, error) {
	id := filepath.Base(path)
	if m.dataDir == "" || !release.ValidID(id) || filepath.Clean(path) != filepath.Clean(release.Dir(m.dataDir, id)) {
		return store.Behavior{}, fmt.Errorf("%w: %s is not a release directory under %s", ErrInvalidRelease, path,
			filepath.Join(m.dataDir, "releases"))
	}
	select {
	case m.activating <- struct{}{}:
		defer func() { <-m.activating }()
	case <-ctx.Done():
		return store.Behavior{}, fmt.Errorf("policy: activating %s: waiting for an earlier activation: %w", id, ctx.Err())
	}
	now, err := m.store.Behavior(ctx)
	if err != nil {
		return store.Behavior{}, fmt.Errorf("policy: activating %s: %w", id, err)
	}
	if now.Epoch != expected {
		return store.Behavior{}, fmt.Errorf("%w: expected epoch %d, the epoch is %d", store.ErrStaleEpoch, expected, now.Epoch)
	}
	p, err := Start(ctx, m.config(id))
	if err != nil {
		return store.Behavior{}, err
	}
	b, err := m.store.ActivateBehavior(ctx, expected, id)
	if err != nil {
		p.Close()
		return store.Behavior{}, err
	}
	m.install(p, b.Epoch)
	return b, nil
}

// Active is the active policy.
func (m *Manager) Active() *Policy {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.active
}

// Pin gives cell the active policy for as long as it runs.
func (m *Manager) Pin(cell string) *Policy {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pins[cell] = m.active
	m.uses[m.active]++
	return m.active
}

// Pinned is the policy cell pinned, or the active one for a cell that pinned none.
func (m *Manager) Pinned(cell string) *Policy {
	m.mu.Lock()
	defer m.mu.Unlock()
	if p, ok := m.pins[cell]; ok {
		return p
	}
	return m.active
}

// Unpin ends cell's pin; a retired policy no cell pins any more is shut down.
func (m *Manager) Unpin(cell string) {
	m.mu.Lock()
	p, ok := m.pins[cell]
	if !ok {
		m.mu.Unlock()
		return
	}
	delete(m.pins, cell)
	m.uses[p]--
	retire := m.uses[p] == 0 && p != m.active
	if m.uses[p] == 0 {
		delete(m.uses, p)
	}
	m.mu.Unlock()
	if retire {
		p.Close()
	}
}

// Close shuts every policy down.
func (m *Manager) Close() {
	m.mu.Lock()
	policies := map[*Policy]bool{m.active: true}
	for _, p := range m.pins {
		policies[p] = true
	}
	m.mu.Unlock()
	for p := range policies {
		p.Close()
	}
}

// PlanEvent decides ev's attention with the policy the database's behavior epoch names
// as it is asked, following an activation another kiln made, and records the decision
// with the epoch and release that made it. An input decided already, here or by another
// kiln, is not decided again: the decision it holds is returned. The caller going away
// ends neither the decision nor its record.
func (m *Manager) PlanEvent(ctx context.Context, ev store.Event) (Decision, error) {
	ctx = context.WithoutCancel(ctx)
	if ev.Attention != nil {
		return readDecision(ev)
	}
	b, err := m.store.Behavior(ctx)
	if err != nil {
		return Decision{}, fmt.Errorf("policy: planning event %d: %w", ev.ID, err)
	}
	m.Follow(b)
	p := m.Active()
	a := p.Plan(ctx, ev.ID, ev.Source, ev.ReceivedAt.UnixMilli())
	recorded, err := m.store.SetAttention(ctx, ev.SessionID, ev.ID, store.Behavior{Epoch: p.Epoch(), ReleaseID: p.ReleaseID()}, a)
	if err != nil {
		return Decision{}, fmt.Errorf("policy: recording the attention of event %d: %w", ev.ID, err)
	}
	return readDecision(recorded)
}

// readDecision is the decision recorded with ev.
func readDecision(ev store.Event) (Decision, error) {
	var d Decision
	if err := json.Unmarshal(ev.Attention, &d.Attention); err != nil {
		return Decision{}, fmt.Errorf("policy: the attention recorded with event %d: %w", ev.ID, err)
	}
	if ev.AttentionBy != nil {
		d.Epoch, d.Release = &ev.AttentionBy.Epoch, ev.AttentionBy.ReleaseID
	}
	return d, nil
}

// Planned are the sources whose inputs are planned.
var Planned = []string{SourceOperator, SourcePeer, SourceDiscordDM, SourceDiscordMention, SourceDiscordAmbient}

// PlanUndecided decides the inputs of session a host that died left without one. Each is
// read again just before it is decided: one decided meanwhile, by another kiln, is
// skipped.
func (m *Manager) PlanUndecided(ctx context.Context, session int64) error {
	events, err := m.store.UndecidedEvents(ctx, session, Planned)
	if err != nil {
		return err
	}
	for _, ev := range events {
		now, err := m.store.EventByID(ctx, session, ev.ID)
		if err != nil {
			return fmt.Errorf("policy: planning event %d: %w", ev.ID, err)
		}
		if now.Attention != nil {
			continue
		}
		if _, err := m.PlanEvent(ctx, now); err != nil {
			return err
		}
	}
	return nil
}
