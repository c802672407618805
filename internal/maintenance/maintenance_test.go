package maintenance_test

import (
	"strconv"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/celltest"
	"github.com/kilnrt/kiln/internal/maintenance"
	"github.com/kilnrt/kiln/internal/store"
)

func TestWorkItemsFromCells(t *testing.T) {
	dir := t.TempDir()
	wb := celltest.Open(t, dir, "a")
	var item store.WorkItem
	celltest.Call(t, wb, `print(json.dumps(await runtime.request("maintenance.originate", purpose="answer shorter",
    reason="the operator said so", evidence_refs=["execution:c-1"])))`, &item)
	if item.WorkItemID != "w-1" || item.State != "open" || item.Origin.Session != "a" || item.Origin.ExecutionID != "c-2" ||
		len(item.EvidenceRefs) != 1 || item.Purpose != "answer shorter" {
		t.Fatalf("%+v", item)
	}

	type refusal struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	for _, tc := range []struct {
		name, params, code string
	}{
		{"purpose at its bound", `purpose="é"*4000, reason="r", evidence_refs=[]`, ""},
		{"purpose past it", `purpose="é"*4001, reason="r", evidence_refs=[]`, "invalid_request"},
		{"reason at its bound", `purpose="p", reason="x"*4000, evidence_refs=[]`, ""},
		{"reason past it", `purpose="p", reason="x"*4001, evidence_refs=[]`, "invalid_request"},
		{"refs at their bound", `purpose="p", reason="r", evidence_refs=["execution:c-1"]*64`, ""},
		{"refs past it", `purpose="p", reason="r", evidence_refs=["execution:c-1"]*65`, "invalid_request"},
		{"a ref that does not resolve", `purpose="p", reason="r", evidence_refs=["execution:c-1", "event:999"]`, "invalid_request"},
		{"a malformed ref", `purpose="p", reason="r", evidence_refs=["nope"]`, "invalid_request"},
		{"no refs", `purpose="p", reason="r"`, "invalid_request"},
		{"an empty purpose", `purpose=" ", reason="r", evidence_refs=[]`, "invalid_request"},
		{"an unknown member", `purpose="p", reason="r", evidence_refs=[], extra=1`, "invalid_request"},
	} {
		var got refusal
		celltest.Call(t, wb, `print(json.dumps(await attempt("maintenance.originate", `+tc.params+`)))`, &got)
		if got.Code != tc.code {
			t.Errorf("%s: %+v; want code %q", tc.name, got, tc.code)
		}
		if tc.name == "a ref that does not resolve" && !strings.Contains(got.Message, `"event:999"`) {
			t.Errorf("%s: %q names no ref", tc.name, got.Message)
		}
	}

	for _, tc := range []struct {
		name, params, code string
	}{
		{"an unknown item", `work_item_id="w-99", outcome="changed"`, maintenance.CodeUnknownWorkItem},
		{"not an item id", `work_item_id="w-01", outcome="changed"`, maintenance.CodeUnknownWorkItem},
		{"an unknown outcome", `work_item_id="w-1", outcome="done"`, "invalid_request"},
		{"the item", `work_item_id="w-1", outcome="no-change"`, ""},
		{"the item again", `work_item_id="w-1", outcome="changed"`, maintenance.CodeWorkItemClosed},
	} {
		var got refusal
		celltest.Call(t, wb, `print(json.dumps(await attempt("maintenance.assess", `+tc.params+`)))`, &got)
		if got.Code != tc.code {
			t.Errorf("%s: %+v; want code %q", tc.name, got, tc.code)
		}
	}

	// Another session of the data directory sees the items, and assesses one.
	other := celltest.Open(t, dir, "b")
	var closed store.WorkItem
	celltest.Call(t, other, `print(json.dumps(await runtime.request("maintenance.assess", work_item_id="w-2", outcome="abandoned")))`, &closed)
	if closed.State != "closed" || closed.Assessment == nil || closed.Assessment.By.Session != "b" || closed.Origin.Session != "a" {
		t.Errorf("%+v", closed)
	}
}

// Bound: MaxOpenItems items open, and the next is refused until one is assessed.
func TestOpenItemsAreBounded(t *testing.T) {
	wb := celltest.Open(t, t.TempDir(), "a")
	const perCell = 100
	for opened := 0; opened < maintenance.MaxOpenItems; opened += perCell {
		n := min(perCell, maintenance.MaxOpenItems-opened)
		var codes []string
		celltest.Call(t, wb, `print(json.dumps([(await attempt("maintenance.originate", purpose="p", reason="r", evidence_refs=[])).get("code", "")
    for _ in range(`+itoa(n)+`)]))`, &codes)
		for i, c := range codes {
			if c != "" {
				t.Fatalf("item %d: %s", opened+i+1, c)
			}
		}
	}
	var codes []string
	celltest.Call(t, wb, `print(json.dumps([(await attempt("maintenance.originate", purpose="p", reason="r", evidence_refs=[])).get("code", ""),
    (await attempt("maintenance.assess", work_item_id="w-1", outcome="deferred")).get("code", ""),
    (await attempt("maintenance.originate", purpose="p", reason="r", evidence_refs=[])).get("code", "")]))`, &codes)
	if len(codes) != 3 || codes[0] != maintenance.CodeOpenItemLimit || codes[1] != "" || codes[2] != "" {
		t.Errorf("past the bound, assess, again: %q; want %s, ok, ok", codes, maintenance.CodeOpenItemLimit)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
