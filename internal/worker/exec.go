package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/wire"
)

// resignalInterval is how often SIGINT is repeated while an interrupted cell runs on.
const resignalInterval = 50 * time.Millisecond

// cpuOverrun is how much CPU time past Config.CPUSeconds a cell may use before the host
// hard-stops its worker. The worker raises CPULimitExceeded in the cell at the limit,
// and again each second; only a cell inside one call that returns to no Python code
// (a long C loop) runs on past it.
const cpuOverrun = 2 * time.Second

// cpuCheckAfter is when to look again at a cell that may use left more CPU time: with
// every CPU busy for it, it cannot have used more by then.
func cpuCheckAfter(left time.Duration) time.Duration {
	return max(left/time.Duration(runtime.NumCPU()), 100*time.Millisecond)
}

// Status is how a cell ended: a Record's Status, wire.StatusOK … wire.StatusInterrupted,
// or StatusFailed.
type Status string

// StatusFailed is the status of a record the host made because the worker died, or
// broke the protocol, during the cell. The other statuses are the protocol's.
const StatusFailed Status = "failed"

// Limit names a limit a cell hit: a Record's Limit.
type Limit string

// Record is how one cell ended, as the caller sees it: its status, its bounded output,
// and its error. Package kiln gives it to embedders as kiln.Record.
type Record struct {
	// Session names the durable session the cell ran in, when its host keeps one.
	Session string `json:"session,omitempty"`
	// ID is the cell's id, "c-1" for a session's first cell.
	ID string `json:"id"`
	// Generation is the worker generation the cell ran in, "g-1" for the first.
	Generation string `json:"generation"`
	// Status is how the cell ended.
	Status Status `json:"status"`
	// StartedAt is when the host recorded the cell's start, in UTC to the millisecond,
	// and DurationMs the milliseconds from it to the recorded end: the durable record's
	// times. Both are zero when the host keeps no record of the cell.
	StartedAt  time.Time `json:"started_at"`
	DurationMs int64     `json:"duration_ms"`
	// Output is the cell's stdout and stderr, its displays and its result, in the order
	// the cell made them: adjacent writes to one stream merge into one record, and a
	// display between them splits it. The text is held to the per-cell bound of 65,536
	// bytes and 256 records, the displays to theirs (32 items, 8 MiB).
	Output []wire.Output `json:"output"`
	// TruncatedBytes counts the output let go to keep within the bound.
	TruncatedBytes int64 `json:"truncated_bytes"`
	// Error is the error text of a cell that did not end ok or yielded (the traceback
	// of what it raised, or the host's reason); nil otherwise.
	Error *string `json:"error"`
	// Exception is what the cell raised, in parts; nil when it raised nothing, or the
	// record is the host's.
	Exception *wire.Exception `json:"exception"`
	// RawStdout and RawStderr are the ends of what the cell wrote to the real
	// descriptors 1 and 2, its child processes included; nil when it wrote nothing there.
	RawStdout *RawTail `json:"raw_stdout,omitempty"`
	RawStderr *RawTail `json:"raw_stderr,omitempty"`
	// Limit names the workbench's limit the cell hit: LimitMemory (a MemoryError, or
	// a process of the worker's cgroup the kernel killed for want of memory while the
	// cell ran), LimitCPU, LimitProcesses or LimitTimeout; empty when it hit none.
	Limit Limit `json:"limit,omitempty"`
	// NamespaceLost says the generation ended with this cell: its variables are gone,
	// and the next cell runs in a new generation. The host also sets it on the record of
	// a cell that ran in a new namespace because the generation before it ended with no
	// cell running, and says why in NamespaceLostReason.
	NamespaceLost       bool   `json:"namespace_lost"`
	NamespaceLostReason string `json:"namespace_lost_reason,omitempty"`
	// NotRun says the host refused the cell before sending it to the worker (its source
	// over the size limit, not UTF-8, or not encodable): it never ran, and Error says why.
	NotRun bool `json:"not_run,omitzero"`
	// DisplayDropped counts the MIME items of the cell's displays left out to keep within
	// the display bounds (each such display keeps its text/plain, with a note).
	DisplayDropped int64 `json:"display_dropped,omitzero"`
}

// Execute runs code as cell id and returns its record. Cancelling ctx interrupts the
// cell exactly as Interrupt does. A cell that does not stop within the interrupt grace
// is hard-stopped: the generation ends and the record says the namespace was lost. A
// cell the host refuses to send (too large, not UTF-8) gets a record with status error
// saying why, marked NotRun, and the generation stays as it was. An error return means the cell never
// started: the generation is busy or has ended.
func (w *Worker) Execute(ctx context.Context, id, code string) (Record, error) {
	return w.ExecuteStream(ctx, id, code, nil)
}

// ExecuteStream is Execute, handing onOutput, when not nil, each chunk of stdout and
// stderr and each display the cell streams, as it comes, on the caller's goroutine; all
// of them are handed over before it returns, and the record's output is exactly what
// they were, in their order (chunks merged by stream between displays), with the cell's
// result records where the cell made them.
func (w *Worker) ExecuteStream(ctx context.Context, id, code string, onOutput func(wire.Output)) (Record, error) {
	if !wire.ValidIdentifier(id) {
		return Record{}, fmt.Errorf("worker: invalid cell id %q", id)
	}
	frame, refusal := w.executeFrame(id, code)
	if refusal != "" {
		if err := w.usable(); err != nil {
			return Record{}, err
		}
		return Record{ID: id, Generation: w.Generation(), Status: wire.StatusError, Error: &refusal, NotRun: true}, nil
	}
	opCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	op := &operation{id: id, result: make(chan wire.Result, 1), interrupted: make(chan struct{}),
		ctx: opCtx, cancel: cancel, stream: newStream(onOutput)}
	defer cancel()
	if w.confined.Memory > 0 {
		op.oomKills = w.confined.OOMKills()
	}

	// The execute frame is queued under w.mu, so an interrupt for this id, which also
	// takes w.mu, always follows it on the wire.
	w.mu.Lock()
	if err := w.setState(Busy); err != nil {
		w.mu.Unlock()
		return Record{}, err
	}
	w.op = op
	w.rawOut.begin()
	w.rawErr.begin()
	w.queue(outgoing{frame: frame, kind: "execute"}) // a failure ends the generation: see w.dead below
	w.mu.Unlock()
	defer w.deliver(op) // what came with the completion, after it was read

	var grace, resignal, cpuCheck <-chan time.Time
	var cpuTimer *time.Timer
	var cpu *cellCPU
	var cpuBudget time.Duration
	if w.cfg.CPUSeconds > 0 {
		var ok bool
		if cpu, ok = startCellCPU(w.proc.Program()); ok {
			// The worker's own limit is moved in whole seconds, as RLIMIT_CPU counts:
			// the budget allows it one more.
			cpuBudget = time.Second + time.Duration(w.cfg.CPUSeconds)*time.Second + cpuOverrun
			cpuTimer = time.NewTimer(cpuCheckAfter(cpuBudget))
			defer cpuTimer.Stop()
			cpuCheck = cpuTimer.C
		}
	}
	cancelled, interrupted := ctx.Done(), op.interrupted
	for {
		select {
		case res := <-op.result:
			return w.finish(op, res), nil
		case <-op.stream.wake:
			w.deliver(op)
		case <-interrupted:
			interrupted = nil
			timer := time.NewTimer(w.cfg.InterruptGrace)
			defer timer.Stop()
			grace = timer.C
			ticker := time.NewTicker(resignalInterval)
			defer ticker.Stop()
			resignal = ticker.C
		case <-resignal:
			// A SIGINT that lands just before a blocking call (time.sleep, select) wakes
			// nothing; the worker acts on repeats only while the interrupt is unserved.
			w.proc.Signal(syscall.SIGINT)
		case <-cancelled:
			cancelled = nil
			// Not waited for: its frame may queue behind a large one the busy worker
			// reads only when the SIGINT repeats below make it.
			go w.Interrupt(id)
		case <-cpuCheck:
			if left := cpuBudget - cpu.used(); left > 0 {
				cpuTimer.Reset(cpuCheckAfter(left))
				continue
			}
			w.invalidate(fmt.Errorf("%w: cell %s", ErrCPUOverrun, id))
			rec := w.lost(op, StatusFailed, fmt.Sprintf("the cell used %s past its %d CPU-seconds inside a call "+
				"Python could not interrupt, so the worker was hard-stopped; the namespace of generation %s is lost",
				cpuOverrun, w.cfg.CPUSeconds, w.Generation()))
			rec.Limit = LimitCPU
			return rec, nil
		case <-grace:
			w.invalidate(fmt.Errorf("%w (%s): cell %s", ErrInterruptTimeout, w.cfg.InterruptGrace, id))
			return w.lost(op, wire.StatusInterrupted, fmt.Sprintf(
				"the cell did not stop within %s of its interrupt, so the worker was hard-stopped; "+
					"the namespace of generation %s is lost", w.cfg.InterruptGrace, w.Generation())), nil
		case <-w.dead:
			select {
			case res := <-op.result:
				return w.finish(op, res), nil
			default:
			}
			return w.lost(op, StatusFailed, fmt.Sprintf("the worker ended during the cell: %v; "+
				"the namespace of generation %s is lost", w.Err(), w.Generation())), nil
		}
	}
}

// executeFrame is the frame of cell id, or why the host refuses to send it.
func (w *Worker) executeFrame(id, code string) (frame []byte, refusal string) {
	if len(code) > wire.MaxCodeBytes {
		return nil, fmt.Sprintf("cell source is %d bytes, over the limit of %d; it was not run", len(code), wire.MaxCodeBytes)
	}
	if at := invalidUTF8(code); at >= 0 {
		return nil, fmt.Sprintf("cell source is not valid UTF-8: the byte at offset %d (0x%02x) begins no character; it was not run", at, code[at])
	}
	frame, err := w.encode(wire.Execute{ID: id, Code: code})
	if err != nil {
		return nil, fmt.Sprintf("the host could not send the cell: %v; it was not run", err)
	}
	return frame, ""
}

// invalidUTF8 is the offset of the first byte of s that is not part of a valid UTF-8
// sequence, or -1 when s is valid.
func invalidUTF8(s string) int {
	for i, r := range s {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(s[i:]); size == 1 {
				return i
			}
		}
	}
	return -1
}

// usable is nil when an operation could start now: the generation is idle.
func (w *Worker) usable() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return checkState(w.state, w.cause, Busy)
}

// finish turns the worker's completion into the record and frees the worker.
func (w *Worker) finish(op *operation, res wire.Result) Record {
	w.mu.Lock()
	if w.op == op {
		w.op = nil
	}
	if w.state == Busy {
		w.setState(Idle)
	}
	w.mu.Unlock()
	op.cancel()
	rec := Record{ID: op.id, Generation: w.Generation(), Status: Status(res.Status), Output: res.Output,
		TruncatedBytes: res.TruncatedBytes, Error: res.Error, Exception: res.Exception,
		Limit: w.cfg.hitLimit(res.Exception)}
	if rec.Limit == "" && w.oomKilled(op) {
		rec.Limit = LimitMemory
	}
	if op.stream != nil {
		rec.RawStdout, rec.RawStderr = w.rawTails()
		rec.DisplayDropped = op.stream.displayDrops
	}
	if res.Kind == wire.ResultFailed {
		rec.Status = StatusFailed
	}
	return rec
}

// The limits a Record's Limit names.
const (
	LimitMemory  Limit = "memory"      // the address space (Config.MemoryBytes), or the cgroup's memory
	LimitCPU     Limit = "cpu_seconds" // the cell's CPU time (Config.CPUSeconds)
	LimitTimeout Limit = "timeout"     // the cell's wall clock, as its caller set it
	// LimitProcesses is the number of tasks of the worker's cgroup
	// (Config.Sandbox.MaxProcesses): a fork or a thread it refused.
	LimitProcesses Limit = "max_processes"
)

// hitLimit names the limit a cell that raised e hit, if any.
func (c Config) hitLimit(e *wire.Exception) Limit {
	switch {
	case e == nil:
		return ""
	case e.Type == "CPULimitExceeded" && c.CPUSeconds > 0:
		return LimitCPU
	case e.Type == "MemoryError" && c.MemoryBytes > 0:
		return LimitMemory
	case c.Sandbox.MaxProcesses > 0 && c.Sandbox.Profile.Confines() && refusedTask(e):
		return LimitProcesses
	}
	return ""
}

// oomCountWait bounds how long a lost cell's record waits for the worker to be reaped
// before it reads the OOM kills of its cgroup.
const oomCountWait = time.Second

// oomKilled says the kernel killed a process of the worker's cgroup for want of memory
// while op ran: the worker, or a process the cell started, where the cgroup's memory
// ran out before an address space did, so that no MemoryError was raised.
func (w *Worker) oomKilled(op *operation) bool {
	return w.confined.Memory > 0 && w.confined.OOMKills() > op.oomKills
}

// refusedTask says e is a process or thread the kernel refused to start: fork's
// EAGAIN, which Python raises as BlockingIOError from os.fork or subprocess, or a
// thread that could not start.
func refusedTask(e *wire.Exception) bool {
	switch e.Type {
	case "BlockingIOError":
		return strings.Contains(e.Traceback, "fork") || strings.Contains(e.Traceback, "spawn")
	case "RuntimeError":
		return strings.Contains(e.Value, "can't start new thread")
	}
	return false
}

// lost is the record the host makes from what it saw when the generation ended during
// the cell.
func (w *Worker) lost(op *operation, status Status, msg string) Record {
	var limit Limit
	if w.confined.Memory > 0 {
		// The kernel counts its kill just after it sends it: the count is read once
		// the worker is reaped.
		select {
		case <-w.proc.Exited():
		case <-time.After(oomCountWait):
		}
		if w.oomKilled(op) {
			limit = LimitMemory
			msg += fmt.Sprintf("; the kernel killed a process of the worker's cgroup for want of memory (its limit is %d bytes)", w.confined.Memory)
		}
	}
	rec := Record{ID: op.id, Generation: w.Generation(), Status: status, Error: &msg, NamespaceLost: true, Limit: limit}
	w.mu.Lock()
	w.op = nil
	if op.stream != nil {
		// What was streamed was the caller's already; the record keeps it.
		rec.Output = slices.Clone(op.stream.records)
		rec.DisplayDropped = op.stream.displayDrops
	}
	w.mu.Unlock()
	if op.stream != nil {
		rec.RawStdout, rec.RawStderr = w.rawTails()
	}
	return rec
}

// Interrupt asks the worker to stop operation id. The cell ends interrupted with its
// namespace intact, or, past the interrupt grace, the generation is hard-stopped.
func (w *Worker) Interrupt(id string) error {
	w.mu.Lock()
	if w.state == Dead {
		w.mu.Unlock()
		return fmt.Errorf("%w: %w", ErrDead, w.cause)
	}
	op := w.op
	if op == nil || op.id != id {
		w.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrNotRunning, id)
	}
	if op.interruptSent {
		w.mu.Unlock()
		return nil
	}
	op.interruptSent = true
	close(op.interrupted)
	w.mu.Unlock()
	// The signal makes a busy worker read what waits on its socket, which also frees a
	// write stuck behind a large frame it had not read; the frame says which operation.
	// Execute wrote its frame before it published op, so this frame follows it.
	if err := w.proc.Signal(syscall.SIGINT); err != nil {
		return err
	}
	if err := w.send(wire.Interrupt{ID: id}, nil); err != nil {
		return err
	}
	// The worker may have handled the first signal before the frame came; this one finds
	// it there. A worker that has exited meanwhile needs none: the interrupt was sent.
	w.proc.Signal(syscall.SIGINT)
	return nil
}

// hostRequest hands a request to the handler: on the reader itself when the handler says
// its method is Immediate, else on a goroutine of its own, so that the reader keeps
// serving while the handler works. Whether the request's execution is the running cell is
// judged here, in the order the frames arrived: a request read after its cell's
// completion is never live.
func (w *Worker) hostRequest(m wire.HostRequest) {
	w.mu.Lock()
	op := w.op
	live := op != nil && op.id == m.ExecutionID
	count, most := &w.strays, MaxStrayRequestFrames
	if live {
		count, most = &op.requests, MaxRequestFrames
	}
	*count++
	flood := *count > most
	w.mu.Unlock()
	if flood {
		w.invalidate(fmt.Errorf("%w: more than %d for execution %q", ErrRequestFlood, most, m.ExecutionID))
		return
	}
	ctx := w.ended
	if live {
		ctx = op.ctx
	}
	call := newCall(m, w.cfg.Generation, live)
	// A reply that arrives after the cell ended is discarded by the worker.
	if im, ok := w.cfg.Handler.(Immediate); ok && im.Immediate(call.Method) {
		w.reply(m, w.cfg.Handler.Serve(ctx, call))
		return
	}
	go func() { w.reply(m, w.cfg.Handler.Serve(ctx, call)) }()
}

// reply queues the reply to m. A reply that cannot be queued has ended the generation.
func (w *Worker) reply(m wire.HostRequest, r wire.Reply) {
	w.send(wire.HostReply{ID: m.ID, ExecutionID: m.ExecutionID, Reply: r}, nil)
}

// Errors of Invoke.
var (
	// ErrHookTimeout is an invocation that did not end within its budget; the hooks
	// generation was invalidated, and the next invocation needs a new one.
	ErrHookTimeout = errors.New("worker: the hook did not answer within its budget")
	// ErrHookFailed is an invocation the hooks worker reported failed: the hook raised,
	// returned no decision of its slot, or the input did not fit the slot.
	ErrHookFailed = errors.New("worker: the hook failed")
)

// Invoke asks a hooks generation to decide slot for input, as operation id, and returns
// the decision the hook returned. budget bounds the whole call, waiting behind an earlier
// invocation included: one invocation runs at a time. A hook that has not answered when
// the budget runs out, or when ctx ends, invalidates the generation.
func (w *Worker) Invoke(ctx context.Context, id, slot string, input jsontext.Value, budget time.Duration) (jsontext.Value, error) {
	if w.cfg.Role != wire.RoleHooks {
		return nil, fmt.Errorf("worker: invoke on a %s worker", w.cfg.Role)
	}
	if !wire.ValidIdentifier(id) {
		return nil, fmt.Errorf("worker: invalid invocation id %q", id)
	}
	deadline := time.NewTimer(budget)
	defer deadline.Stop()
	timedOut := func(what string) error {
		err := fmt.Errorf("%w (%s): %s %s %s", ErrHookTimeout, budget, slot, id, what)
		w.invalidate(err)
		return err
	}
	select {
	case w.invoking <- struct{}{}:
		defer func() { <-w.invoking }()
	case <-deadline.C:
		return nil, timedOut("waited for an earlier invocation")
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-w.dead:
		return nil, fmt.Errorf("%w: %w", ErrDead, w.Err())
	}
	op, err := w.startOperation(id, wire.Invoke{ID: id, Slot: slot, Input: input})
	if err != nil {
		return nil, err
	}
	defer op.cancel()
	select {
	case res := <-op.result:
		w.finish(op, res)
		if res.Kind == wire.ResultFailed {
			return nil, fmt.Errorf("%w: %s %s: %s", ErrHookFailed, slot, id, derefOr(res.Error, "no reason given"))
		}
		return res.Value, nil
	case <-deadline.C:
		return nil, timedOut("did not answer")
	case <-ctx.Done():
		w.invalidate(fmt.Errorf("worker: invocation %s abandoned: %w", id, ctx.Err()))
		return nil, ctx.Err()
	case <-w.dead:
		select {
		case res := <-op.result: // it answered just before the end
			w.finish(op, res)
			if res.Kind != wire.ResultFailed {
				return res.Value, nil
			}
		default:
		}
		return nil, fmt.Errorf("%w during %s %s: %w", ErrDead, slot, id, w.Err())
	}
}

func derefOr(s *string, otherwise string) string {
	if s == nil {
		return otherwise
	}
	return *s
}
