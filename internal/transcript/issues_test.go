package transcript

import (
	"strings"
	"testing"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// TestARefusedCellHasNoRunningTime: a cell the record says did not run is stamped with
// when it was refused, and no running time, whatever its source; one that ran has its
// running time, whatever its source's size.
func TestARefusedCellHasNoRunningTime(t *testing.T) {
	ended := t0.Add(2 * time.Millisecond)
	msg := "cell source is not valid UTF-8; it was not run"
	refused := store.Execution{Code: "x = 1", Status: "error", StartedAt: t0, EndedAt: &ended,
		Output: jsontext.Value(`[]`), Error: &msg, NotRun: true}
	got := RenderToolResult(resultOf(refused))
	if strings.Contains(got, "ran") || !strings.HasPrefix(got, "[2026-09-13T19:54:53Z]\n") {
		t.Errorf("a refused cell renders %q", got)
	}
	ran := store.Execution{Code: strings.Repeat("#", wire.MaxCodeBytes+1), Status: "ok", StartedAt: t0, EndedAt: &ended,
		Output: jsontext.Value(`[]`)}
	if got := RenderToolResult(resultOf(ran)); !strings.Contains(got, " · ran 2ms]") {
		t.Errorf("a cell the record says ran renders %q", got)
	}
}

// TestAnActorRecordsOnlyWhatIsKnown: no step, execution or path is invented.
func TestAnActorRecordsOnlyWhatIsKnown(t *testing.T) {
	data, err := json.Marshal(Actor{Origin: OriginHost, Reason: "noticed"})
	if err != nil || string(data) != `{"origin":"host","reason":"noticed"}` {
		t.Errorf("%s %v", data, err)
	}
}

// TestARenameOfAnUnchangedTextIsObserved: sources renamed over the same text are a
// change, recorded once, after which the chain names the new sources.
func TestARenameOfAnUnchangedTextIsObserved(t *testing.T) {
	pin := NewPin(sources("contract", "a\n", "old", "b\n"), ReasonSessionStart, t0)
	first := Observe(&Head{Text: pin.Text, Digest: pin.Digest}, sources("contract", "a\n", "old", "b\n", "x", "c\n"),
		Actor{Origin: OriginHost}, t0).(*Revision)
	links := []Link{{Seq: 1, Pin: &pin}, {Seq: 2, Revision: first}}
	head := Resolve(links).Head
	renamed := sources("contract", "a\n", "new", "b\n", "x", "c\n")
	rev, ok := Observe(head, renamed, Actor{Origin: OriginHost}, t0).(*Revision)
	if !ok {
		t.Fatal("a rename was not observed")
	}
	links = append(links, Link{Seq: 3, Revision: rev})
	res := Resolve(links)
	if !res.Complete || res.Head.Sources[1].Name != "new" {
		t.Fatalf("after the rename: %+v", res)
	}
	if Observe(res.Head, renamed, Actor{Origin: OriginHost}, t0) != nil {
		t.Error("the rename was observed twice")
	}
	if got := RenderObservation(*rev); !strings.Contains(got, "the text is unchanged; its sources are now contract, new, x.") {
		t.Errorf("the rename renders %q", got)
	}
}

// TestABrokenLinkIsShownAsSuchAndTheWholeTextRestartsTheChain: a revision whose patch
// was altered is broken, as is what follows it, and is rendered as broken; a revision
// carrying the whole text makes the chain whole again.
func TestABrokenLinkIsShownAsSuchAndTheWholeTextRestartsTheChain(t *testing.T) {
	pin := NewPin(sources("contract", "a\nb\n"), ReasonSessionStart, t0)
	head := HeadOf(pin)
	rev := NewRevision(head, sources("contract", "a\nB\n"), Actor{Origin: OriginHost}, t0)
	rev.Change.Patches[0].NewLines = []string{"EVIL\n"} // altered in the store
	later := NewRevision(Head{Text: "a\nB\n", Digest: Digest("a\nB\n")}, sources("contract", "a\nB\nc\n"), Actor{Origin: OriginHost}, t0)
	links := []Link{{Seq: 1, Pin: &pin}, {Seq: 2, Revision: &rev}, {Seq: 3, Revision: &later}}
	res := Resolve(links)
	if res.Complete || res.StopSeq != 2 || res.Head.Text != "a\nb\n" || len(res.Broken) != 2 {
		t.Fatalf("%+v", res)
	}
	tr := Transcript{Entries: []Entry{{Seq: 1, Link: &links[0]}, {Seq: 2, Link: &links[1]}, {Seq: 3, Link: &links[2]}}}
	got := tr.Render()
	if len(got) != 3 || strings.Contains(got[1].Content, "EVIL") || !strings.Contains(got[1].Content, "does not reconstruct") ||
		!strings.Contains(got[2].Content, "it follows record 2") {
		t.Errorf("rendered %+v", got)
	}
	restart := Restart(sources("contract", "a\nB\nc\n"), Actor{Origin: OriginHost}, t0)
	res = Resolve(append(links, Link{Seq: 4, Revision: &restart}))
	if !res.Complete || res.Head.Text != "a\nB\nc\n" || len(res.Broken) != 2 || res.Head.Sources == nil {
		t.Errorf("after the restart: %+v", res)
	}
}

// TestAFoldHidesOnlyWhatItCovers: the pin a fold appends at the end of the log takes
// over from its frontier, so the records between the frontier and the pin still render.
func TestAFoldHidesOnlyWhatItCovers(t *testing.T) {
	first := NewPin(sources("contract", "one\n"), ReasonSessionStart, t0)
	links := []Link{{Seq: 1, Pin: &first}}
	input := func(text string) *Input {
		return &Input{Source: "operator", ReceivedAt: t0, Payload: jsontext.Value(`{"text":"` + text + `"}`)}
	}
	fold := Fold(links, 3, sources("contract", "one\n"), t0)
	if fold.FrontierSeq != 3 {
		t.Fatalf("%+v", fold)
	}
	tr := Transcript{Entries: []Entry{
		{Seq: 1, Link: &links[0]},
		{Seq: 2, Input: input("covered")},
		{Seq: 3, Input: input("kept, before the pin")},
		{Seq: 4, Link: &Link{Seq: 4, Pin: &fold}},
		{Seq: 5, Input: input("after the pin")},
	}}
	var got []string
	for _, m := range tr.Render() {
		got = append(got, m.Content)
	}
	want := []string{"one\n", "[2026-09-13T19:54:53Z · operator]\nkept, before the pin", "[2026-09-13T19:54:53Z · operator]\nafter the pin"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("got %q\nwant %q", got, want)
	}
}
