package orientation_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/celltest"
	"github.com/kilnrt/kiln/internal/orientation"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/transcript"
)

func TestStageCurrentAdopt(t *testing.T) {
	dir := t.TempDir()
	a := celltest.Open(t, dir, "a")
	b := celltest.Open(t, dir, "b")
	for _, tc := range []struct {
		name, params, want string
	}{
		{"a text at its bound", `candidate_id="big", text="x"*65536, scope={"kind": "global"}`, "{"},
		{"one past it", `candidate_id="bigger", text="x"*65537, scope={"kind": "global"}`, "invalid_request"},
		{"a target that is not one", `candidate_id="t", text="x", target="AGENTS.md", scope={"kind": "global"}`, "invalid_request"},
		{"no scope", `candidate_id="t", text="x"`, "invalid_request"},
		{"another scope kind", `candidate_id="t", text="x", scope={"kind": "everyone"}`, "invalid_request"},
		{"a bad id", `candidate_id="a b", text="x", scope={"kind": "global"}`, "invalid_request"},
		{"global", `candidate_id="g1", text="global one\n", scope={"kind": "global"}`, "{"},
		{"the same again", `candidate_id="g1", text="global one\n", target="orientation", scope={"kind": "global"}`, "{"},
		{"the id with another text", `candidate_id="g1", text="other\n", scope={"kind": "global"}`, orientation.CodeCandidateExists},
		{"a's own", `candidate_id="mine", text="a's own\n", scope={"kind": "session"}`, "{"},
	} {
		if got := celltest.Attempt(t, a, "orientation.stage", tc.params); !strings.HasPrefix(got, tc.want) {
			t.Errorf("stage %s: %.200s; want %s", tc.name, got, tc.want)
		}
	}
	if got := celltest.Attempt(t, a, "orientation.current", `scope={"kind": "global"}`); got != "null" {
		t.Errorf("current before any adoption: %s", got)
	}
	for _, tc := range []struct {
		wb           *kiln.Workbench
		name, params string
		want         string
	}{
		{a, "an unknown candidate", `candidate_id="nope", operation_id="op-0"`, orientation.CodeUnknownCandidate},
		{b, "a's candidate by b", `candidate_id="mine", operation_id="op-0"`, orientation.CodeUnknownCandidate},
		{a, "a bad operation id", `candidate_id="g1", operation_id=""`, "invalid_request"},
		{a, "g1", `candidate_id="g1", operation_id="op-1"`, `{"adoption":`},
		{b, "g1 again, the same operation", `candidate_id="g1", operation_id="op-1"`, `{"adoption":`},
		{a, "big, staged on no adoption", `candidate_id="big", operation_id="op-2"`, orientation.CodeConflict},
		{a, "op-1 for another candidate", `candidate_id="mine", operation_id="op-1"`, orientation.CodeOperationReused},
		{a, "a's own", `candidate_id="mine", operation_id="op-3"`, `{"adoption":`},
	} {
		if got := celltest.Attempt(t, tc.wb, "orientation.adopt", tc.params); !strings.HasPrefix(got, tc.want) {
			t.Errorf("adopt %s: %.200s; want %s", tc.name, got, tc.want)
		}
	}
	var cur store.Adoption
	if err := json.Unmarshal([]byte(celltest.Attempt(t, b, "orientation.current", `scope={"kind": "global"}`)), &cur); err != nil ||
		cur.CandidateID != "g1" || cur.Text != "global one\n" || cur.Digest != transcript.Digest("global one\n") || cur.By.Session != "a" {
		t.Errorf("current global: %+v %v", cur, err)
	}
	if got := celltest.Attempt(t, b, "orientation.current", `scope={"kind": "session"}`); got != "null" {
		t.Errorf("b's own: %s", got)
	}

	// Each session runs under its own adoption, else the global one; b notices the
	// global one as the host's change, with what is known of it.
	for _, tc := range []struct {
		wb   *kiln.Workbench
		want string
	}{{a, "a's own"}, {b, "global one"}} {
		got := celltest.Attempt(t, tc.wb, "runtime.instructions", "")
		var instr struct {
			Text     string `json:"text"`
			Complete bool   `json:"complete"`
		}
		if err := json.Unmarshal([]byte(got), &instr, json.RejectUnknownMembers(false)); err != nil || !instr.Complete ||
			!strings.HasSuffix(instr.Text, "\n"+tc.want+"\n") {
			t.Errorf("%s runs under %.300q…, %v; want it to end with %q", tc.wb.Session(), instr.Text, err, tc.want)
		}
	}
	a.Close()
	b.Close()
	st, err := store.OpenDir(context.Background(), dir, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for name, want := range map[string]string{"a": "changed by execution", "b": "changed outside this transcript"} {
		sess, err := st.SessionByName(context.Background(), name)
		if err != nil {
			t.Fatal(err)
		}
		tr, err := transcript.Load(context.Background(), st, sess.ID)
		if err != nil {
			t.Fatal(err)
		}
		res := transcript.Resolve(tr.Links())
		if !res.Complete || len(res.Broken) > 0 {
			t.Errorf("%s's chain: %+v", name, res)
		}
		var seen []string
		for _, l := range tr.Links() {
			if r := l.Revision; r != nil && strings.Contains(r.Actor.Reason, "orientation is candidate") {
				seen = append(seen, transcript.RenderObservation(*r)+" / "+r.Actor.Reason)
			}
		}
		if len(seen) == 0 || !strings.Contains(seen[0], want) {
			t.Errorf("%s's observations of the adoption: %q; want the first %q", name, seen, want)
		}
		if name == "b" && (len(seen) != 1 || !strings.Contains(seen[0], "adopted for every session by session a, execution c-")) {
			t.Errorf("b's observation says %q", seen)
		}
	}
}

// Candidates staged on one base in two sessions and adopted at once: one wins, the
// other is refused orientation_conflict.
func TestRacingAdoptionsFromCells(t *testing.T) {
	dir := t.TempDir()
	wbs := []*kiln.Workbench{celltest.Open(t, dir, "a"), celltest.Open(t, dir, "b")}
	for i, wb := range wbs {
		if got := celltest.Attempt(t, wb, "orientation.stage", `candidate_id="c`+wb.Session()+`", text="`+wb.Session()+`", scope={"kind": "global"}`); !strings.HasPrefix(got, "{") {
			t.Fatalf("stage %d: %s", i, got)
		}
	}
	got := make([]string, len(wbs))
	var wg sync.WaitGroup
	for i, wb := range wbs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = celltest.Attempt(t, wb, "orientation.adopt", `candidate_id="c`+wb.Session()+`", operation_id="op-`+wb.Session()+`"`)
		}()
	}
	wg.Wait()
	won := 0
	for _, g := range got {
		switch {
		case strings.HasPrefix(g, `{"adoption":`):
			won++
		case g != orientation.CodeConflict:
			t.Errorf("%s; want a win or %s", g, orientation.CodeConflict)
		}
	}
	if won != 1 {
		t.Errorf("%q: %d won; want 1", got, won)
	}
}

// Bounds: MaxCandidates staged and not adopted, and the next is refused until one is
// adopted; candidate and operation ids of 128 characters, and not 129.
func TestStagingIsBounded(t *testing.T) {
	wb := celltest.Open(t, t.TempDir(), "a")
	celltest.Call(t, wb, `codes = []`+"\n"+`print(0)`, new(int))
	for i := 0; i < orientation.MaxCandidates-1; i += 100 { // a cell makes at most so many
		celltest.Call(t, wb, `for i in range(`+strconv.Itoa(i)+`, `+strconv.Itoa(min(i+100, orientation.MaxCandidates-1))+`):
    r = await attempt("orientation.stage", candidate_id=f"c{i}", text=str(i), scope={"kind": "session"})
    codes.append(r.get("code", ""))
print(len(codes))`, new(int))
	}
	var codes []string
	celltest.Call(t, wb, `for cid in ["x" * 128, "y" * 129, "past"]:
    r = await attempt("orientation.stage", candidate_id=cid, text=cid, scope={"kind": "session"})
    codes.append(r.get("code", ""))
for op in ["o" * 129, "o" * 128]:
    r = await attempt("orientation.adopt", candidate_id="x" * 128, operation_id=op)
    codes.append(r.get("code", ""))
r = await attempt("orientation.stage", candidate_id="past", text="past", scope={"kind": "session"})
codes.append(r.get("code", ""))
print(json.dumps(codes))`, &codes)
	want := append(make([]string, orientation.MaxCandidates-1),
		"", "invalid_request", orientation.CodeCandidateLimit, // the 256th, an id too long, the 257th
		"invalid_request", "", // an operation id too long, then one at the bound
		"") // one adopted: room for one more
	if !slices.Equal(codes, want) {
		t.Errorf("codes %q; want %q", codes, want)
	}
}
