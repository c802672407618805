package policy

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/release"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/worker"
)

// testHooks misbehave on cue: events 8 and 9 are deferred 86400 and 86401 s, 10 and 11
// woken at priorities -1 and 0, 12 and 13 ignored with reasons of 1000 and 1001 bytes, an operator
// input is ignored (event 7: woken at priority 7), a DM claims top priority, a
// mention raises, anything else gets garbage; a send of "slow" sleeps 5 s, "raise"
// raises, "garbage" returns 42, and the rest is allowed — also an over-long text.
const testHooks = `import time
from kiln_hooks import Allow, Defer, Ignore, Wake

def attention(request, context):
    if request.event_id in (8, 9):
        return Defer(86392 + request.event_id)
    if request.event_id in (10, 11):
        return Wake(request.event_id * 101 - 1111)  # -1, then 0
    if request.event_id in (12, 13):
        return Ignore("x" * (request.event_id + 988))  # 1000, then 1001 bytes
    if request.source == "operator" and request.event_id == 7:
        return Wake(7)
    if request.source == "operator":
        return Ignore("not now")
    if request.source == "discord.dm":
        return Wake(100)
    if request.source == "discord.mention":
        raise RuntimeError("boom")
    return "garbage"

def delivery(request, context):
    if request.text == "slow":
        time.sleep(5)
    if request.text == "raise":
        raise ValueError("bad text")
    if request.text == "garbage":
        return 42
    return Allow()
`

const manifest = `{"version":1,"hooks":{"attention.plan":"testhooks:attention","delivery.review":"testhooks:delivery"}}`

func pythonPath(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath("python3")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// storeRelease stores a release of files under data and returns its identity.
func storeRelease(t *testing.T, data string, files map[string]string) string {
	t.Helper()
	src := t.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	snap, err := release.Read(src)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := release.Store(data, snap); err != nil {
		t.Fatal(err)
	}
	return snap.ID
}

func priority(a Attention) int {
	if a.Priority == nil {
		return -1
	}
	return *a.Priority
}

func TestTheInitialRelease(t *testing.T) {
	p := New(Config{Python: pythonPath(t), SessionID: "s", ReleaseID: Initial().ID})
	defer p.Close()
	ctx := context.Background()
	for source, want := range map[string]struct {
		action   string
		priority int
	}{SourceOperator: {"wake", 100}, SourceDiscordDM: {"wake", 60}, SourceDiscordMention: {"wake", 40},
		SourceDiscordAmbient: {"defer", -1}} {
		if a := p.Plan(ctx, 1, source, 1); a.Action != want.action || priority(a) != want.priority || a.Note != "" {
			t.Errorf("%s: %+v; want %+v", source, a, want)
		}
	}
	if a := p.Plan(ctx, 1, "email", 1); a.Action != "ignore" {
		t.Errorf("an unclassified source is planned: %+v", a)
	}
	for _, text := range []string{"hello", strings.Repeat("é", MaxSendText)} {
		if r := p.Review(ctx, 1, text); r.Action != "allow" {
			t.Errorf("%.20q (%d characters): %+v", text, len([]rune(text)), r)
		}
	}
	for _, text := range []string{"", strings.Repeat("é", MaxSendText+1), "bad \xff utf-8"} {
		if r := p.Review(ctx, 1, text); r.Action != "hold" || r.Reason == "" {
			t.Errorf("%.20q: %+v; want held", text, r)
		}
	}
}

func TestHookRulesAndFailures(t *testing.T) {
	data := dataDir(t)
	id := storeRelease(t, data, map[string]string{"manifest.json": manifest, "testhooks.py": testHooks})
	p := New(Config{Python: pythonPath(t), SessionID: "s", ReleaseID: id, DataDir: data})
	defer p.Close()
	ctx := context.Background()

	if a := p.Plan(ctx, 1, SourceOperator, 1); a.Action != "wake" || priority(a) != TopPriority || !strings.Contains(a.Note, "cannot be suppressed") {
		t.Errorf("operator ignored: %+v", a)
	}
	if a := p.Plan(ctx, 7, SourceOperator, 1); a.Action != "wake" || priority(a) != TopPriority || !strings.Contains(a.Note, "was raised") {
		t.Errorf("operator woken low: %+v", a)
	}
	if a := p.Plan(ctx, 8, SourceDiscordAmbient, 1); a.Action != "defer" || *a.Seconds != MaxDeferSeconds || a.Note != "" {
		t.Errorf("a defer of exactly %d s: %+v", MaxDeferSeconds, a)
	}
	if a := p.Plan(ctx, 9, SourceDiscordAmbient, 1); a.Action != "defer" || *a.Seconds != 60 || !strings.Contains(a.Note, "not in (0, 86400]") {
		t.Errorf("a defer of %d s: %+v", MaxDeferSeconds+1, a)
	}
	for event, want := range map[int64]string{10: "not in 0..100", 11: "", 12: "", 13: "a reason of 1..1000 bytes"} {
		a := p.Plan(ctx, event, SourceDiscordMention, 1)
		if want == "" && a.Note != "" || want != "" && (a.Action != "defer" || !strings.Contains(a.Note, want)) {
			t.Errorf("event %d: %+v; want %q", event, a, want)
		}
	}
	if a := p.Plan(ctx, 2, SourceDiscordDM, 1); a.Action != "wake" || priority(a) != TopPriority-1 || !strings.Contains(a.Note, "only operator input") {
		t.Errorf("a DM at top priority: %+v", a)
	}
	for _, source := range []string{SourceDiscordMention, SourceDiscordAmbient} { // raises; garbage
		if a := p.Plan(ctx, 3, source, 1); a.Action != "defer" || !strings.Contains(a.Note, "attention.plan unavailable") {
			t.Errorf("%s: %+v", source, a)
		}
	}
	if r := p.Review(ctx, 4, "raise"); r.Action != "hold" || !strings.Contains(r.Reason, "ValueError: bad text") {
		t.Errorf("a raising hook: %+v", r)
	}
	if r := p.Review(ctx, 5, "garbage"); r.Action != "hold" || !strings.Contains(r.Reason, "delivery.review") {
		t.Errorf("garbage: %+v", r)
	}
	if r := p.Review(ctx, 6, strings.Repeat("x", MaxSendText+1)); r.Action != "hold" {
		t.Errorf("an over-long text the hook would allow: %+v", r)
	}

	// A hook that sleeps 5 s: the invocation ends at its budget, not the hook's leisure.
	started := time.Now()
	r := p.Review(ctx, 7, "slow")
	took := time.Since(started)
	if r.Action != "hold" || !strings.Contains(r.Reason, "did not answer within its budget") {
		t.Errorf("a sleeping hook: %+v", r)
	}
	if took < Budget || took >= 5*time.Second {
		t.Errorf("the invocation ended after %s; want its budget, %s, not the hook's 5 s", took, Budget)
	}
	first := p.current
	r = p.Review(ctx, 8, "fine")
	if r.Action == "hold" && strings.Contains(r.Reason, "did not start within the budget") {
		// A loaded machine can take longer than the budget to start the new generation;
		// the start carries on, and serves the next decision.
		t.Logf("the fresh generation started late: %+v", r)
		r = p.Review(ctx, 9, "fine")
	}
	if r.Action != "allow" {
		t.Errorf("after a timeout: %+v", r)
	}
	if p.current == first || first.w.State() != worker.Dead {
		t.Error("the next invocation did not get a fresh generation")
	}
}

func openStore(t *testing.T, data string) *store.Store {
	t.Helper()
	st, err := store.OpenDir(context.Background(), data, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func TestActivation(t *testing.T) {
	ctx := context.Background()
	data := dataDir(t)
	st := openStore(t, data)
	good := storeRelease(t, data, map[string]string{"manifest.json": manifest, "testhooks.py": testHooks})
	broken := storeRelease(t, data, map[string]string{"manifest.json": strings.ReplaceAll(manifest, "testhooks", "missing")})
	m, err := NewManager(ctx, st, data, Config{Python: pythonPath(t), SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	pinned := m.Pin("c-1")
	if pinned.ReleaseID() != Initial().ID {
		t.Fatalf("the first policy is %s", pinned.ReleaseID())
	}

	// A candidate whose import fails never becomes active.
	if _, err := m.Activate(ctx, release.Dir(data, broken), 0); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Fatalf("a release whose import fails: %v; want the failed import named", err)
	}
	if b, _ := st.Behavior(ctx); b.Epoch != 0 || b.ReleaseID != Initial().ID {
		t.Fatalf("after a failed activation: %+v", b)
	}
	if _, err := m.Activate(ctx, filepath.Join(t.TempDir(), good), 0); !errors.Is(err, ErrInvalidRelease) {
		t.Errorf("a path outside the data directory: %v", err)
	}

	// Two activations racing with the same expected epoch: exactly one wins.
	won := activateAtOnce(t, ctx, m, release.Dir(data, good), 2)
	if b, _ := st.Behavior(ctx); won != 1 || b.Epoch != 1 || b.ReleaseID != good {
		t.Fatalf("%d won; behavior %+v", won, b)
	}
	if _, err := m.Activate(ctx, release.Dir(data, good), 0); !errors.Is(err, store.ErrStaleEpoch) {
		t.Errorf("a stale expectation: %v", err)
	}

	// The running cell keeps its policy; a new cell gets the active one.
	if m.Pinned("c-1") != pinned || m.Active().ReleaseID() != good || m.Pin("c-2").ReleaseID() != good {
		t.Error("a pinned cell's policy changed under it")
	}
	if r := m.Pinned("c-1").Review(ctx, 1, "raise"); r.Action != "allow" {
		t.Errorf("the pinned builtin policy: %+v", r)
	}
	m.Unpin("c-1")
	if !pinned.closed {
		t.Error("the retired policy outlived its last cell")
	}

	// A manager opened later (another kiln) starts from the epoch's release.
	again, err := NewManager(ctx, st, data, Config{Python: pythonPath(t), SessionID: "s"})
	if err != nil || again.Active().ReleaseID() != good || again.Active().Epoch() != 1 {
		t.Fatalf("%v %v", err, again)
	}
	again.Close()
}

// TestSendIsIdempotentAndRecorded drives local.send through a router: a confirmed send
// is an operator-lane event with its receipt; the same execution and request again gets
// the same receipt and makes no second event; a new request may say it again.
func TestSendIsIdempotentAndRecorded(t *testing.T) {
	ctx := context.Background()
	data := dataDir(t)
	st := openStore(t, data)
	sess, _, _ := st.EnsureSession(ctx, "s")
	m, err := NewManager(ctx, st, data, Config{Python: pythonPath(t), SessionID: "s"})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var said []Receipt
	r := host.New(host.Config{Store: st, Session: sess})
	r.Handle(SendMethod, m.Send(func(text string, rc Receipt) { said = append(said, rc) }))
	r.SetGeneration("g-1")
	e, _ := st.StartExecution(ctx, sess.ID, "g-1", "x")
	r.Begin(e.CellID)
	m.Pin(e.CellID)
	send := func(requestID, text string) Receipt {
		body, _ := json.Marshal(map[string]string{"method": SendMethod, "text": text})
		reply := r.Serve(ctx, worker.Call{Generation: "g-1", ExecutionID: e.CellID, RequestID: requestID,
			Method: SendMethod, Request: jsontext.Value(body), Live: true})
		var rc Receipt
		if reply.Kind != "ok" || json.Unmarshal(reply.Value, &rc) != nil {
			t.Fatalf("%s: %+v", requestID, reply)
		}
		return rc
	}
	first := send("r-1", "hello")
	if first.Status != "confirmed" || first.EventID == nil || first.Reason != nil {
		t.Fatalf("first: %+v", first)
	}
	ev, err := st.EventByID(ctx, sess.ID, *first.EventID)
	if err != nil || ev.Source != store.SourceAgent || !strings.Contains(string(ev.Payload), `"hello"`) {
		t.Fatalf("its event: %+v %v", ev, err)
	}
	if retry := send("r-1", "hello"); retry.EffectID != first.EffectID || retry.EventID == nil || *retry.EventID != *first.EventID {
		t.Errorf("the retry got %+v; want %+v", retry, first)
	}
	again := send("r-2", "hello")
	if again.Status != "confirmed" || again.EffectID == first.EffectID || *again.EventID == *first.EventID {
		t.Errorf("a new request with the same text: %+v", again)
	}
	if held := send("r-3", ""); held.Status != "held" || held.EventID != nil || held.Reason == nil {
		t.Errorf("an empty text: %+v", held)
	}
	if len(said) != 3 {
		t.Errorf("speech told %d times; want once per recorded send (3)", len(said))
	}
}

// TestValidSendText checks the one rule of a send's text at its bound and one past it,
// in characters and not bytes, and each other part of it, saying which part failed.
func TestValidSendText(t *testing.T) {
	for _, text := range []string{"x", "é", strings.Repeat("x", MaxSendText), strings.Repeat("é", MaxSendText),
		strings.Repeat("😀", MaxSendText)} {
		if err := ValidSendText(text); err != nil {
			t.Errorf("%.12q (%d bytes): %v; want valid", text, len(text), err)
		}
	}
	for text, why := range map[string]string{
		strings.Repeat("x", MaxSendText+1): "it has 4001",
		strings.Repeat("é", MaxSendText+1): "it has 4001",
		"":                                 "it is empty",
		"bad \xff utf-8":                   "it is not UTF-8",
		strings.Repeat("x", MaxSendText) + "\xff": "it is not UTF-8",
	} {
		err := ValidSendText(text)
		if err == nil || err.Error() != "the text must be 1..4000 characters of UTF-8; "+why {
			t.Errorf("%.12q (%d bytes): %v; want %q", text, len(text), err, why)
		}
	}
}

// warnings counts the records logged at warning level or above.
type warnings struct{ n atomic.Int64 }

func (w *warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w *warnings) Handle(context.Context, slog.Record) error    { w.n.Add(1); return nil }
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler           { return w }
func (w *warnings) WithGroup(string) slog.Handler                { return w }

// TestCloseDuringAStartWarnsOfNothing closes a policy while its hooks worker starts:
// the start ends, and nothing failed.
func TestCloseDuringAStartWarnsOfNothing(t *testing.T) {
	var w warnings
	p := New(Config{Python: pythonPath(t), SessionID: "s", ReleaseID: Initial().ID, Logger: slog.New(&w)})
	if _, err := p.ensure(); err != nil {
		t.Fatal(err)
	}
	p.Close() // well before python's handshake
	if n := w.n.Load(); n != 0 {
		t.Fatalf("%d warnings of a start Close ended", n)
	}
}
