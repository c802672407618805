package transcript

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kilnrt/kiln/internal/linediff"
)

var t0 = time.Date(2026, 9, 13, 19, 54, 53, 0, time.UTC)

func sources(pairs ...string) []Source {
	var out []Source
	for i := 0; i < len(pairs); i += 2 {
		out = append(out, NewSource(pairs[i], pairs[i+1]))
	}
	return out
}

func TestRule1PinsTheFirstText(t *testing.T) {
	now := sources("contract", "be careful\n", "AGENTS.md", "run the tests\n")
	pin, ok := Observe(nil, now, Actor{Origin: OriginHost}, t0).(Pin)
	if !ok {
		t.Fatal("no pin")
	}
	want := Pin{Type: TypePin, Digest: Digest("be careful\n\nrun the tests\n"), Text: "be careful\n\nrun the tests\n",
		Reason: ReasonSessionStart, PinnedAtMs: t0.UnixMilli()}
	if pin != want {
		t.Errorf("got %+v\nwant %+v", pin, want)
	}
	head := HeadOf(pin)
	if Observe(&head, now, Actor{Origin: OriginHost}, t0) != nil {
		t.Error("an unchanged text was observed")
	}
}

func TestRule2KeepsTheHeadAndObservesTheChange(t *testing.T) {
	before := sources("contract", "a\nb\nc\n", "AGENTS.md", "one\n")
	pin := NewPin(before, ReasonSessionStart, t0)
	head := HeadOf(pin)
	after := sources("contract", "a\nB\nc\n", "AGENTS.md", "one\n")
	actor := Actor{Origin: OriginHost, Reason: "noticed as the session opened"}
	rev, ok := Observe(&head, after, actor, t0.Add(time.Minute)).(*Revision)
	if !ok {
		t.Fatal("no revision")
	}
	// The pin recorded no sources: the first revision patches the joined text.
	wantChange := Change{Form: FormDiff, BaseDigest: pin.Digest, Patches: []linediff.Patch{
		{Source: JoinedSource, StartLine: 2, OldLines: []string{"b\n"}, NewLines: []string{"B\n"}}}}
	if fmt.Sprint(rev.Change) != fmt.Sprint(wantChange) || rev.Digest != Digest("a\nB\nc\n\none\n") ||
		rev.Actor != actor || rev.ObservedAtMs != t0.Add(time.Minute).UnixMilli() || len(rev.Sources) != 2 {
		t.Fatalf("got %+v", rev)
	}
	res := Resolve([]Link{{Seq: 1, Pin: &pin}, {Seq: 2, Revision: rev}})
	if !res.Complete || res.Head.Text != "a\nB\nc\n\none\n" || res.Head.Sources == nil {
		t.Fatalf("resolution %+v", res)
	}

	// Now the sources are known and line up: patches go source by source.
	later := sources("contract", "a\nB\nc\n", "AGENTS.md", "one\ntwo\n")
	rev2 := NewRevision(*res.Head, later, Actor{Origin: OriginSession, ExecutionID: "c-3"}, t0)
	if len(rev2.Change.Patches) != 1 || rev2.Change.Patches[0].Source != "AGENTS.md" || rev2.Change.Patches[0].StartLine != 2 {
		t.Errorf("per-source patches: %+v", rev2.Change)
	}
	// A source that appears: the sets no longer line up, so the joined text is patched.
	more := append(later, NewSource("style", "terse\n"))
	rev3 := NewRevision(*res.Head, more, Actor{Origin: OriginHost}, t0)
	if rev3.Change.Form != FormDiff || rev3.Change.Patches[0].Source != JoinedSource {
		t.Errorf("joined patches: %+v", rev3.Change)
	}
	for _, r := range []Revision{rev2, rev3} {
		if got := Resolve([]Link{{Seq: 1, Pin: &pin}, {Seq: 2, Revision: rev}, {Seq: 3, Revision: &r}}); !got.Complete || got.Head.Digest != r.Digest {
			t.Errorf("chain to %s: %+v", r.Digest, got)
		}
	}
}

func TestAPatchThatDoesNotReconstructIsReplacedByTheWholeText(t *testing.T) {
	head := Head{Text: "a\nb\n", Digest: Digest("a\nb\n")}
	rev := Revision{Type: TypeRevision, Digest: Digest("a\nc\n"), Change: Change{Form: FormDiff, BaseDigest: head.Digest,
		Patches: []linediff.Patch{{Source: JoinedSource, StartLine: 2, OldLines: []string{"b\n"}, NewLines: []string{"WRONG\n"}}}}}
	got := verified(head, rev, "a\nc\n")
	if got.Change.Form != FormFull || got.Change.Text == nil || *got.Change.Text != "a\nc\n" || got.Change.Patches != nil {
		t.Errorf("got %+v", got.Change)
	}
}

func TestResolveStopsAtTheLastTextThatReconstructed(t *testing.T) {
	pin := NewPin(sources("contract", "one\n"), ReasonSessionStart, t0)
	head := HeadOf(pin)
	good := NewRevision(head, sources("contract", "two\n"), Actor{Origin: OriginHost}, t0)
	next, _ := advance(head, good)
	bad := NewRevision(next, sources("contract", "three\n"), Actor{Origin: OriginHost}, t0)
	bad.Change.Patches[0].NewLines = []string{"tampered\n"}
	res := Resolve([]Link{{Seq: 1, Pin: &pin}, {Seq: 5, Revision: &good}, {Seq: 9, Revision: &bad}})
	if res.Complete || res.StopSeq != 9 || res.Head.Text != "two\n" || !strings.Contains(res.Problem, "not its own") {
		t.Errorf("got %+v (head %+v)", res, res.Head)
	}
	// A later pin (a fold) starts a chain of its own.
	fold := NewPin(sources("contract", "four\n"), ReasonFold, t0)
	if res := Resolve([]Link{{Seq: 1, Pin: &pin}, {Seq: 9, Revision: &bad}, {Seq: 12, Pin: &fold}}); !res.Complete || res.Head.Text != "four\n" {
		t.Errorf("after a broken link and a new pin: %+v", res)
	}
	tamperedPin := pin
	tamperedPin.Text = "other\n"
	if res := Resolve([]Link{{Seq: 1, Pin: &tamperedPin}}); res.Complete || res.Head != nil {
		t.Errorf("a pin without its digest: %+v", res)
	}
}

func TestRule3FoldReasons(t *testing.T) {
	pin := NewPin(sources("contract", "one\n"), ReasonSessionStart, t0)
	head := HeadOf(pin)
	rev := NewRevision(head, sources("contract", "two\n"), Actor{Origin: OriginHost}, t0)
	links := []Link{{Seq: 1, Pin: &pin}, {Seq: 4, Revision: &rev}}
	for _, c := range []struct {
		links    []Link
		frontier int64
		want     string
	}{
		{links[:1], 10, ReasonFold},            // the head is the pin's own text
		{links, 3, ReasonFold},                 // the observation survives the fold
		{links, 10, ReasonFoldCoveredRevision}, // the fold covers the head's only support
		{nil, 10, ReasonFold},
	} {
		if got := FoldReason(c.links, c.frontier); got != c.want {
			t.Errorf("%d links, frontier %d: %s; want %s", len(c.links), c.frontier, got, c.want)
		}
	}
}

// TestReplayReconstructsEveryText is the property: whatever the texts and source sets
// a session goes through, replaying its header records gives back each text it had.
func TestReplayReconstructsEveryText(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	words := []string{"a\n", "b\n", "c\n", "", "x", "\r\n", "é\n", "run tests\n"}
	text := func() string {
		var b strings.Builder
		for range rng.IntN(12) {
			b.WriteString(words[rng.IntN(len(words))])
		}
		return b.String()
	}
	names := []string{"contract", "AGENTS.md", "style", "extra"}
	for trial := range 300 {
		var links []Link
		var head *Head
		var texts []string
		for step := range 1 + rng.IntN(8) {
			var now []Source
			for _, n := range names[:1+rng.IntN(len(names))] {
				if rng.IntN(4) > 0 {
					now = append(now, NewSource(n, text()))
				}
			}
			switch rec := Observe(head, now, Actor{Origin: OriginHost}, t0).(type) {
			case Pin:
				links = append(links, Link{Seq: int64(step), Pin: &rec})
			case *Revision:
				links = append(links, Link{Seq: int64(step), Revision: rec})
			default:
				continue
			}
			texts = append(texts, Joined(now))
			res := Resolve(links)
			if !res.Complete || res.Head.Text != Joined(now) {
				t.Fatalf("trial %d step %d: %+v; want %q", trial, step, res, Joined(now))
			}
			head = res.Head
		}
		for i := range links {
			if res := Resolve(links[:i+1]); res.Head.Text != texts[i] {
				t.Fatalf("trial %d: link %d reconstructs %q; it recorded %q", trial, i, res.Head.Text, texts[i])
			}
		}
	}
}
