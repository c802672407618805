package serve

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/kilnrt/kiln/internal/agent"
	"github.com/kilnrt/kiln/internal/approval"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kilnrt/kiln/internal/sandbox"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// MaxIdempotencyKeyBytes bounds one idempotency key.
const MaxIdempotencyKeyBytes = 256

// Session is one session the daemon holds. It runs one cell at a time; its runtime is
// started at creation, or, for a session listed again after a restart, at its next
// cell or input.
type Session struct {
	d  *Daemon
	id string

	mu         sync.Mutex
	st         state
	storeID    int64
	rt         Runtime       // nil until started
	opening    chan struct{} // closed once a start under way has ended
	gone       bool          // its first opening failed: the daemon does not list it
	stopping   chan struct{} // while Stop runs; closed once it has ended
	running    *Execution
	inputs     int // inputs being recorded now
	lastActive time.Time
	idle       *time.Timer
	keys       map[string]idempotent // the keys of the cell starting or running
	// elsewhere is the holder of a session of the shared record another daemon holds,
	// as it was looked up: its writes are refused (ErrHeldElsewhere).
	elsewhere *store.Holder
}

// idempotent is what an idempotency key names while its cell starts or runs: the code's
// digest and the execution. The record holds every key, the ended cells' with them.
type idempotent struct {
	sum [32]byte
	x   *Execution
}

func (d *Daemon) newSession(st state, storeID int64) *Session {
	return &Session{d: d, id: st.Config.ID, st: st, storeID: storeID, keys: map[string]idempotent{}}
}

// ID is the session's name.
func (s *Session) ID() string { return s.id }

// StoreID is the session's id in the durable record; 0 while the session first opens.
func (s *Session) StoreID() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.storeID
}

// RecordID is the session's id in the durable record. A session that first opens has
// none yet: RecordID waits for the opening to end, or for ctx. A session whose opening
// failed has none, and is not found.
func (s *Session) RecordID(ctx context.Context) (int64, error) {
	for {
		s.mu.Lock()
		id, opening := s.storeID, s.opening
		s.mu.Unlock()
		switch {
		case id != 0:
			return id, nil
		case opening == nil:
			return 0, fmt.Errorf("%w: %s did not open", ErrNoSession, s.id)
		}
		select {
		case <-opening:
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

func (s *Session) stopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.State == StateStopped
}

// stopState says whether the session is stopped and, while its stop runs, returns a
// channel closed once it has ended.
func (s *Session) stopState() (stopped bool, stopping <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.State == StateStopped, s.stopping
}

// stoppedBefore says whether the session stopped before t.
func (s *Session) stoppedBefore(t time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.StoppedAt != nil && s.st.StoppedAt.Before(t)
}

// halted says whether the session is stopped and its stop has ended.
func (s *Session) halted() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.st.State == StateStopped && s.stopping == nil
}

// opened ends the opening under way. A session whose first opening failed is gone:
// those waiting for the opening find no session, rather than open it again.
func (s *Session) opened(gone bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.gone = s.gone || gone
	close(s.opening)
	s.opening = nil
}

// Info is what a client is shown of a session.
type Info struct {
	ID           string     `json:"id"`
	State        string     `json:"state"`
	Generation   string     `json:"generation"` // of the live runtime; "" when none is live
	Running      string     `json:"running"`    // the execution running, "" when none is
	CreatedAt    time.Time  `json:"created_at"`
	LastActiveAt time.Time  `json:"last_active_at"`
	StoppedAt    *time.Time `json:"stopped_at"`
	StopReason   string     `json:"stop_reason,omitempty"`
	// HeldBy, on a record daemons share, is the daemon that holds the open session when
	// it is another than the one answering: its URL, else its process.
	HeldBy string `json:"held_by,omitempty"`
	Config Config `json:"config"`
	// Sandbox is what confines the live generation: the profile, the mechanisms that
	// applied, the limits of its cgroup, and what a best-effort profile left out;
	// absent when no generation is live.
	Sandbox *sandbox.Applied `json:"sandbox,omitempty"`
}

// Confined is a Runtime that says what confines its live generation.
type Confined interface {
	Sandbox() *sandbox.Applied
}

// EnvHidden stands for every value of a session's env where the session is described:
// a key passed there is the client's secret, and only its name is shown.
const EnvHidden = "(hidden)"

// withoutSecrets is c with its env's values hidden.
func (c Config) withoutSecrets() Config {
	if len(c.Env) == 0 {
		return c
	}
	env := make(map[string]string, len(c.Env))
	for k := range c.Env {
		env[k] = EnvHidden
	}
	c.Env = env
	return c
}

// Info describes the session now; its config's env values are hidden.
func (s *Session) Info() Info {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := Info{ID: s.id, State: s.st.State, CreatedAt: s.st.CreatedAt, LastActiveAt: s.lastActive,
		StoppedAt: s.st.StoppedAt, StopReason: s.st.StopReason, Config: s.st.Config.withoutSecrets()}
	if s.running != nil && s.running.cell != "" {
		in.Running = s.running.ID()
	}
	if s.elsewhere != nil {
		in.HeldBy = heldBy(*s.elsewhere)
	}
	rt := s.rt
	s.mu.Unlock()
	if rt != nil { // asked without s.mu: a runtime tells of a cell's start holding its own lock
		in.Generation = rt.Generation()
		if c, ok := rt.(Confined); ok {
			in.Sandbox = c.Sandbox()
		}
	}
	s.mu.Lock()
	return in
}

// idleTimeout is the session's idle timeout; 0 for none.
func (s *Session) idleTimeout() time.Duration {
	if ms := s.st.Config.Limits.IdleTimeoutMS; ms > 0 {
		return time.Duration(ms) * time.Millisecond
	}
	return max(s.d.opts.IdleTimeout, 0)
}

// touch notes activity now and sets the idle timer from it.
func (s *Session) touch() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lastActive = s.d.opts.Clock().UTC()
	timeout := s.idleTimeout()
	if timeout == 0 || s.st.State != StateOpen {
		return
	}
	if s.idle == nil {
		s.idle = time.AfterFunc(timeout, s.idleCheck)
		return
	}
	s.idle.Reset(timeout)
}

// idleCheck stops the session if it has been idle for its timeout.
func (s *Session) idleCheck() {
	pending := s.inputsPending()
	s.mu.Lock()
	timeout := s.idleTimeout()
	now := s.d.opts.Clock()
	idleFor := now.Sub(s.lastActive)
	if a, ok := s.rt.(Activity); ok {
		idleFor = min(idleFor, now.Sub(a.LastActive()))
	}
	busy := s.running != nil || s.opening != nil || s.inputs > 0 || pending
	open := s.st.State == StateOpen
	if open && (busy || idleFor < timeout) {
		s.idle.Reset(recheckIn(timeout, idleFor))
	}
	s.mu.Unlock()
	if !open || busy || idleFor < timeout {
		return
	}
	reason := fmt.Sprintf("idle for %s (its idle timeout)", timeout.Round(time.Millisecond))
	if err := s.Stop(reason); err != nil && !errors.Is(err, ErrStopped) && !errors.Is(err, ErrHeldElsewhere) {
		s.d.log.Warn("stopping an idle session", "session", s.id, "err", err)
	}
}

// recheckIn is when a session idle for idleFor, and not stopped for it, is checked
// again: once its timeout has passed since it was last active, or, busy past its timeout
// (a long cell, an input its agent has not taken), a whole timeout later, rather than
// at once, again and again, while it stays busy.
func recheckIn(timeout, idleFor time.Duration) time.Duration {
	if idleFor >= timeout {
		return timeout
	}
	return timeout - idleFor
}

// inputsPending says whether the record holds inputs the session's agent has not
// taken yet: one recorded a moment ago, before the agent's turn began, or one deferred
// to later. The session is not idle while they wait; a read that fails says so too,
// since stopping would leave them unanswered until another input came.
func (s *Session) inputsPending() bool {
	sid := s.StoreID()
	if !s.d.opts.Agent.HasAgent() || sid == 0 {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), pendingReadTimeout)
	defer cancel()
	events, err := s.d.store.Undelivered(ctx, sid, 1)
	if err != nil {
		s.d.log.Warn("reading an idle session's inputs", "session", s.id, "err", err)
		return true
	}
	return len(events) > 0
}

// pendingReadTimeout bounds inputsPending's read of the record.
const pendingReadTimeout = 5 * time.Second

// writable refuses a write to a session another daemon holds.
func (s *Session) writable() error {
	if s.elsewhere != nil {
		return &HeldElsewhereError{Session: s.id, Holder: *s.elsewhere}
	}
	return nil
}

// runtime returns the session's runtime, starting it if none is live.
func (s *Session) runtime(ctx context.Context) (Runtime, error) {
	if err := s.writable(); err != nil {
		return nil, err
	}
	for {
		s.mu.Lock()
		switch {
		case s.gone:
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: %s did not open", ErrNoSession, s.id)
		case s.st.State == StateStopped:
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: %s", ErrStopped, s.id)
		case s.rt != nil:
			rt := s.rt
			s.mu.Unlock()
			return rt, nil
		case s.opening != nil:
			wait := s.opening
			s.mu.Unlock()
			select {
			case <-wait:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case s.d.closing.Load(): // read under s.mu: a shutdown after it waits for this opening
			s.mu.Unlock()
			return nil, ErrClosed
		}
		s.opening = make(chan struct{})
		s.mu.Unlock()
		err := s.d.open(ctx, s)
		s.opened(false)
		if err != nil {
			return nil, s.d.heldElsewhere(s, err)
		}
	}
}

// Execution is a cell the session runs or ran. A handle is held while it runs; once
// it has ended, its record is the store's.
type Execution struct {
	s          *Session
	cell       string // set once the start is recorded
	generation string
	started    chan struct{} // closed once cell is set, or the cell did not run
	done       chan struct{} // closed once the cell's end is recorded
	cancel     context.CancelFunc
	live       *liveOutput // nil for a handle of a cell already ended
	err        error       // why the cell did not run, or its end could not be recorded; set before done
	final      *Record     // the record as its end was recorded, when the runtime told it; set before done
}

// ID is the execution's id: the session's name and the cell's, "<session>:c-N".
func (x *Execution) ID() string { return ExecutionID(x.s.id, x.cell) }

// Cell is the cell's id, c-N.
func (x *Execution) Cell() string { return x.cell }

// Done is closed once the cell has ended and its end is recorded.
func (x *Execution) Done() <-chan struct{} { return x.done }

// Err says, once Done is closed, why the host could not run or record the cell; nil
// when the record is whole.
func (x *Execution) Err() error {
	<-x.done
	return x.err
}

// ExecutionID is the id of session's cell.
func ExecutionID(session, cell string) string { return session + ":" + cell }

// ParseExecutionID splits an execution id into its session and cell.
func ParseExecutionID(id string) (session, cell string, err error) {
	i := strings.LastIndexByte(id, ':')
	if i <= 0 || !validCell(id[i+1:]) {
		return "", "", fmt.Errorf("%w: execution %q is not <session>:c-N", ErrNoCell, id)
	}
	return id[:i], id[i+1:], nil
}

func validCell(cell string) bool {
	n, ok := strings.CutPrefix(cell, "c-")
	v, err := strconv.ParseUint(n, 10, 63)
	return ok && err == nil && v > 0 && strconv.FormatUint(v, 10) == n
}

// Execute starts code as the session's next cell and returns once its start is
// recorded; the cell runs on after ctx ends, until it ends or is interrupted. A ctx
// that ends before the start is recorded interrupts the cell. A cell already running is
// ErrBusy.
//
// A key makes Execute idempotent: the record holds each key with the digest of its code
// and the cell it started, across restarts, for the daemon's KeyTTL. The same key with
// the same code returns that key's execution, once its start is recorded, where it is
// now; with other code it is ErrKeyReused.
func (s *Session) Execute(ctx context.Context, code, key string) (*Execution, error) {
	if len(key) > MaxIdempotencyKeyBytes {
		return nil, fmt.Errorf("%w: an idempotency key of %d bytes, over %d", ErrInvalid, len(key), MaxIdempotencyKeyBytes)
	}
	if err := s.writable(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(code))
	s.mu.Lock()
	if s.st.State == StateStopped {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrStopped, s.id)
	}
	if k, ok := s.keys[key]; ok && key != "" {
		s.mu.Unlock()
		if k.sum != sum {
			return nil, fmt.Errorf("%w: %q", ErrKeyReused, key)
		}
		return s.startOf(ctx, k.x, false)
	}
	if running := s.running; running != nil {
		s.mu.Unlock()
		if key != "" { // the key may name an ended cell, which is no conflict
			if x, err := s.keyed(ctx, key, sum); x != nil || err != nil {
				return x, err
			}
		}
		if !s.endRecorded(ctx, running) {
			return nil, fmt.Errorf("%w: %s", ErrBusy, s.id)
		}
		// A reader may already have seen its end: the session is free once run returns.
		select {
		case <-running.done:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return s.Execute(ctx, code, key)
	}
	runCtx, cancel := context.WithCancel(s.d.runCtx)
	x := &Execution{s: s, started: make(chan struct{}), done: make(chan struct{}), cancel: cancel, live: newLiveOutput()}
	s.running = x
	if key != "" { // from now on: a request of the same key is answered this execution
		s.keys[key] = idempotent{sum: sum, x: x}
	}
	s.mu.Unlock()

	if key != "" {
		if prev, err := s.claim(ctx, key, sum); prev != nil || err != nil {
			s.mu.Lock()
			s.running = nil
			delete(s.keys, key)
			s.mu.Unlock()
			cancel()
			return prev, err
		}
	}
	go s.run(runCtx, x, code, key)
	x, err := s.startOf(ctx, x, true)
	if err == nil && key != "" {
		s.noteKey(ctx, key, x)
	}
	return x, err
}

// endRecorded says whether the record holds the end of x, the session's running cell:
// run frees the session right after, and whoever read that end may send the next cell.
func (s *Session) endRecorded(ctx context.Context, x *Execution) bool {
	s.mu.Lock()
	cell := x.cell
	s.mu.Unlock()
	if cell == "" {
		return false
	}
	e, err := s.d.store.ExecutionByCell(ctx, s.StoreID(), cell)
	return err == nil && e.EndedAt != nil
}

// claim claims key for code of digest sum in the record, and returns the execution an
// earlier claim of it started, if one did.
func (s *Session) claim(ctx context.Context, key string, sum [32]byte) (*Execution, error) {
	id, err := s.RecordID(ctx)
	if err != nil {
		return nil, err
	}
	k, claimed, err := s.d.store.ClaimKey(ctx, id, key, hex.EncodeToString(sum[:]), s.d.opts.KeyTTL)
	switch {
	case err != nil:
		return nil, fmt.Errorf("serve: idempotency key: %w", err)
	case claimed:
		return nil, nil
	case k.Digest != hex.EncodeToString(sum[:]):
		return nil, fmt.Errorf("%w: %q", ErrKeyReused, key)
	}
	return s.handle(k.Cell), nil
}

// keyed returns the execution key names in the record, nil if it names none.
func (s *Session) keyed(ctx context.Context, key string, sum [32]byte) (*Execution, error) {
	id, err := s.RecordID(ctx)
	if err != nil {
		return nil, err
	}
	k, err := s.d.store.Key(ctx, id, key, s.d.opts.KeyTTL)
	switch {
	case errors.Is(err, store.ErrNotFound) || (err == nil && k.Cell == ""):
		return nil, nil
	case err != nil:
		return nil, fmt.Errorf("serve: idempotency key: %w", err)
	case k.Digest != hex.EncodeToString(sum[:]):
		return nil, fmt.Errorf("%w: %q", ErrKeyReused, key)
	}
	return s.handle(k.Cell), nil
}

// noteKey notes in the record the cell key started. The record is right without it: a
// claim whose cell is not noted is resolved from the cells started after it.
func (s *Session) noteKey(ctx context.Context, key string, x *Execution) {
	if err := s.d.store.NoteKeyCell(context.WithoutCancel(ctx), s.StoreID(), key, x.Cell()); err != nil {
		s.d.log.Warn("noting an idempotency key", "session", s.id, "key", key, "err", err)
	}
}

// startOf waits for x's start to be recorded and returns x, or why it did not run. The
// caller that started x (own) interrupts it if ctx ends first: no one learns the cell's
// id, so if it starts, it is interrupted and recorded so.
func (s *Session) startOf(ctx context.Context, x *Execution, own bool) (*Execution, error) {
	select {
	case <-x.started:
	case <-ctx.Done():
		if own {
			x.cancel()
		}
		return nil, ctx.Err()
	}
	s.mu.Lock()
	cell := x.cell
	s.mu.Unlock()
	if cell == "" {
		<-x.done
		return nil, x.err
	}
	return x, nil
}

// settle notes in the record, once x has ended, what its key names: its cell, or
// nothing for a cell that never ran, so that the key may be given again. Then the key
// is the record's alone.
func (s *Session) settle(key string, x *Execution) {
	ctx := context.Background()
	var err error
	switch {
	case x.cell == "":
		err = s.d.store.ReleaseKey(ctx, s.StoreID(), key)
	default:
		err = s.d.store.NoteKeyCell(ctx, s.StoreID(), key, x.cell)
	}
	if err != nil {
		s.d.log.Warn("noting an idempotency key", "session", s.id, "key", key, "err", err)
	}
	s.mu.Lock()
	if k, ok := s.keys[key]; ok && k.x == x {
		delete(s.keys, key)
	}
	s.mu.Unlock()
}

// handle returns the execution of cell: the running one's handle, or one already done.
func (s *Session) handle(cell string) *Execution {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.running != nil && s.running.cell == cell {
		return s.running
	}
	x := &Execution{s: s, cell: cell, started: make(chan struct{}), done: make(chan struct{})}
	close(x.started)
	close(x.done)
	return x
}

// run runs x on the session's runtime and records its end.
func (s *Session) run(ctx context.Context, x *Execution, code, key string) {
	defer x.cancel()
	startedOnce := sync.OnceFunc(func() { close(x.started) })
	var j *journal
	closeJournal := sync.OnceFunc(func() {
		if j != nil {
			j.close()
		}
	})
	rt, err := s.runtime(ctx)
	if err == nil {
		err = rt.Execute(ctx, code, func(cell, generation string) {
			s.mu.Lock()
			x.cell, x.generation = cell, generation
			s.mu.Unlock()
			j = s.startJournal(cell, x.live)
			startedOnce()
		}, func(o wire.Output) {
			if j != nil && (o.Stream == wire.StreamStdout || o.Stream == wire.StreamStderr || o.Stream == wire.StreamDisplay) {
				j.add(o)
			}
		}, closeJournal, func(e store.Execution, fresh bool) {
			rec := recordOf(s.id, e, fresh)
			x.final = &rec
		})
	}
	closeJournal()
	x.live.end()
	x.err = err
	if key != "" {
		s.settle(key, x)
	}
	s.mu.Lock()
	s.running = nil
	s.mu.Unlock()
	s.touch()
	startedOnce()
	close(x.done)
}

// Execution returns the handle of the session's cell: its record is found in the store.
func (s *Session) Execution(ctx context.Context, cell string) (*Execution, error) {
	if !validCell(cell) {
		return nil, fmt.Errorf("%w: %s:%s", ErrNoCell, s.id, cell)
	}
	if _, err := s.d.store.ExecutionByCell(ctx, s.StoreID(), cell); err != nil {
		if errors.Is(err, store.ErrNotFound) {
			return nil, fmt.Errorf("%w: %s:%s", ErrNoCell, s.id, cell)
		}
		return nil, err
	}
	return s.handle(cell), nil
}

// Interrupt interrupts x, if it is still running (it is hard-stopped past its grace),
// and returns once its end is recorded or ctx ends. ErrNotRunning is a cell that had
// already ended.
func (s *Session) Interrupt(ctx context.Context, x *Execution) error {
	if err := s.writable(); err != nil {
		return err
	}
	s.mu.Lock()
	running := s.running == x
	s.mu.Unlock()
	if !running {
		return fmt.Errorf("%w: %s", ErrNotRunning, x.ID())
	}
	x.cancel() // the runtime interrupts a cell whose context ends, wherever it is in its start
	select {
	case <-x.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Input records text as an operator input of the session, as kiln send does, and
// returns the recorded event with its attention decision. A stopped session is opened
// again for it when the sessions run an agent, which the input wakes; otherwise it is
// ErrStopped.
func (s *Session) Input(ctx context.Context, text string) (store.Event, error) {
	return s.input(ctx, text, s.d.opts.Agent.HasAgent())
}

// input is Input, opening the session again first if it is stopped and reopen is set.
func (s *Session) input(ctx context.Context, text string, reopen bool) (store.Event, error) {
	rt, err := s.runtime(ctx)
	if errors.Is(err, ErrStopped) && reopen {
		return s.reopenWith(ctx, text)
	}
	if err != nil {
		return store.Event{}, err
	}
	s.mu.Lock()
	s.inputs++
	s.mu.Unlock()
	id, err := rt.Input(ctx, text)
	s.mu.Lock()
	s.inputs--
	s.mu.Unlock()
	if err != nil {
		return store.Event{}, err
	}
	s.touch()
	return s.d.store.EventByID(ctx, s.StoreID(), id)
}

// reopenWith opens the stopped session again, with the configuration it was created
// with, and records text as its input; a reopening raced by another finds it open.
func (s *Session) reopenWith(ctx context.Context, text string) (store.Event, error) {
	s.mu.Lock()
	cfg := s.st.Config
	s.mu.Unlock()
	ns, err := s.d.Create(ctx, cfg)
	if errors.Is(err, ErrExists) || errors.Is(err, ErrSettings) { // opened meanwhile, with its own settings
		ns, err = s.d.Session(s.id)
	}
	if err != nil {
		return store.Event{}, fmt.Errorf("serve: reopening %s for an input: %w", s.id, err)
	}
	if ns == s { // still this stopped session: a delete raced the reopening
		return store.Event{}, fmt.Errorf("%w: %s", ErrStopped, s.id)
	}
	return ns.input(ctx, text, false)
}

// Stop stops the session: a running cell is interrupted (hard-stopped past its grace)
// and recorded, the runtime is shut down, and reason is recorded with the stop. The
// session's file is written only while the daemon lists it: a session whose creation
// failed keeps none.
func (s *Session) Stop(reason string) error {
	if err := s.writable(); err != nil {
		return err
	}
	if s.d.shared() && !s.holds() { // listed here, holding nothing: another daemon may hold it now
		if cur, err := s.d.recorded(s.id, s); err == nil && cur != s {
			return cur.stopHere(reason)
		}
	}
	s.mu.Lock()
	if s.st.State == StateStopped {
		s.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrStopped, s.id)
	}
	now := time.Now().UTC()
	s.st.State, s.st.StoppedAt, s.st.StopReason = StateStopped, &now, reason
	st := s.st
	stopping := make(chan struct{})
	s.stopping = stopping
	s.mu.Unlock()
	err := s.shutdown()
	if s.d.opts.OnStop != nil {
		s.d.opts.OnStop(context.Background(), s.id, reason)
	}
	if s.d.lists(s) { // Prune and Create leave a stopping session listed; a failed creation does not
		err = errors.Join(err, s.d.states.save(st))
	}
	s.mu.Lock()
	s.stopping = nil
	close(stopping)
	s.mu.Unlock()
	return err
}

// stopHere stops cur, the record's view of a session listed here that holds nothing:
// refused if another daemon holds it, else stopped as the daemon's own.
func (s *Session) stopHere(reason string) error {
	if err := s.writable(); err != nil {
		return err
	}
	if s.stopped() {
		return fmt.Errorf("%w: %s", ErrStopped, s.id)
	}
	return s.Stop(reason)
}

// shutdown interrupts the running cell, waits for its record, and closes the runtime.
func (s *Session) shutdown() error {
	s.mu.Lock()
	x, opening := s.running, s.opening
	if s.idle != nil {
		s.idle.Stop()
	}
	s.mu.Unlock()
	if opening != nil {
		<-opening
	}
	if x != nil {
		x.cancel()
		<-x.done
	}
	s.mu.Lock()
	rt := s.rt
	s.rt = nil
	s.mu.Unlock()
	if rt == nil {
		return nil
	}
	return rt.Close()
}

// Open starts the session's runtime if none is live: for a session with an agent, what
// makes the agent take the inputs and timers waiting for it.
func (s *Session) Open(ctx context.Context) error {
	_, err := s.runtime(ctx)
	return err
}

// Activity is a Runtime active on its own, as an agent is: its session is idle only
// once the runtime has been too.
type Activity interface {
	// LastActive is when the runtime was last active, now while it is; it must not block.
	LastActive() time.Time
}

// TurnCanceller is a Runtime whose agent runs turns, which it can cancel.
type TurnCanceller interface {
	// CancelTurn cancels the running turn and says whether one was running.
	CancelTurn() bool
}

// Approver is a Runtime whose agent's cells may be held for an operator's decision
// (execution.review).
type Approver interface {
	Decide(ctx context.Context, cell string, approve bool, reason string) (approval.Decision, error)
	Held() []approval.Review
}

// ErrNotResumable is a resume asked of a session whose agent's last turn did not end
// host_died or overflow.
var ErrNotResumable = errors.New("serve: no turn to resume")

// TurnResumer is a Runtime whose agent can resume its last turn.
type TurnResumer interface {
	ResumeTurn(ctx context.Context) (turn, input int64, err error)
}

// ResumeTurn resumes the agent's last turn, which ended host_died or overflow: an input
// saying so wakes the agent. It returns the turn and the input's event id.
func (s *Session) ResumeTurn(ctx context.Context) (turn, input int64, err error) {
	rt, err := s.runtime(ctx)
	if err != nil {
		return 0, 0, err
	}
	tr, ok := rt.(TurnResumer)
	if !ok {
		return 0, 0, ErrNoAgent
	}
	return tr.ResumeTurn(ctx)
}

// ErrNothingToFold is a fold or a reset of a session whose agent's conversation since
// the last fold is empty.
var ErrNothingToFold = errors.New("serve: nothing to fold")

// ErrFoldFailed is a fold whose model call failed or whose summary did not hold; it is
// recorded, and the conversation is kept.
var ErrFoldFailed = errors.New("serve: the fold failed")

// Folder is a Runtime whose agent's conversation can be folded or reset at the
// operator's request.
type Folder interface {
	Fold(ctx context.Context) (agent.Fold, error)
	Reset(ctx context.Context) (agent.Fold, error)
}

// Fold folds the session's agent's conversation now, between turns (after the turn
// running): a summary replaces it. It returns the fold's record.
func (s *Session) Fold(ctx context.Context) (agent.Fold, error) {
	return s.fold(ctx, Folder.Fold)
}

// Reset begins a new transcript segment of the session's agent, between turns: the
// conversation and its summary are dropped, the record kept. It returns the record that
// marks it.
func (s *Session) Reset(ctx context.Context) (agent.Fold, error) {
	return s.fold(ctx, Folder.Reset)
}

func (s *Session) fold(ctx context.Context, do func(Folder, context.Context) (agent.Fold, error)) (agent.Fold, error) {
	rt, err := s.runtime(ctx)
	if err != nil {
		return agent.Fold{}, err
	}
	f, ok := rt.(Folder)
	if !ok {
		return agent.Fold{}, ErrNoAgent
	}
	return do(f, ctx)
}

// ErrNotHeld is a decision for a cell that is not held.
var ErrNotHeld = approval.ErrNotHeld

// Decide approves or rejects the session's held cell (c-N), saying why.
func (s *Session) Decide(ctx context.Context, cell string, approve bool, reason string) (approval.Decision, error) {
	rt, err := s.runtime(ctx)
	if err != nil {
		return approval.Decision{}, err
	}
	ap, ok := rt.(Approver)
	if !ok {
		return approval.Decision{}, ErrNoAgent
	}
	return ap.Decide(ctx, cell, approve, reason)
}

// Held lists the session's cells held for a decision.
func (s *Session) Held(ctx context.Context) ([]approval.Review, error) {
	rt, err := s.runtime(ctx)
	if err != nil {
		return nil, err
	}
	ap, ok := rt.(Approver)
	if !ok {
		return nil, ErrNoAgent
	}
	return ap.Held(), nil
}

// ErrNoAgent is a turn cancelled on a session that runs no agent.
var ErrNoAgent = errors.New("serve: the session runs no agent")

// CancelTurn cancels the agent's running turn and says whether one was running.
func (s *Session) CancelTurn(ctx context.Context) (bool, error) {
	rt, err := s.runtime(ctx)
	if err != nil {
		return false, err
	}
	tc, ok := rt.(TurnCanceller)
	if !ok {
		return false, ErrNoAgent
	}
	return tc.CancelTurn(), nil
}
