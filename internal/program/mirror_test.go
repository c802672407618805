package program

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"reflect"
	"testing"

	"github.com/kilnrt/kiln/python"
)

// TestMirror compares the frame vocabulary with the Python side's mirror of it,
// kiln.protocol, as the child imports it: each frame's required and optional field
// names, the protocol's fd, the truncation marker and the error kinds. A field renamed
// or dropped on either side, or made optional on one, fails it.
func TestMirror(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := python.Install(dir); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(pythonPath, "-I", "-c", `import json, sys
sys.path.insert(0, sys.argv[1])
from kiln import protocol
json.dump({"fd": protocol.PROTOCOL_FD, "marker": protocol.log_truncation_marker(1234),
           "kinds": list(protocol.ERROR_KINDS), "frames": protocol.field_sets()}, sys.stdout)`, dir).Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var py struct {
		FD     int
		Marker string
		Kinds  []string
		Frames map[string]Fields
	}
	if err := json.Unmarshal(out, &py); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	goSets := FieldSets()
	for name, want := range goSets {
		got, ok := py.Frames[name]
		switch {
		case !ok:
			t.Errorf("%s: Python declares no such frame", name)
		case !reflect.DeepEqual(got, want):
			t.Errorf("%s: Python declares %+v; Go %+v", name, got, want)
		}
	}
	for name := range py.Frames {
		if _, ok := goSets[name]; !ok {
			t.Errorf("%s: Go declares no such frame", name)
		}
	}
	if py.FD != 3 {
		t.Errorf("PROTOCOL_FD = %d; want 3", py.FD)
	}
	if want := TruncationMarker(1234); py.Marker != want {
		t.Errorf("marker %q; want %q", py.Marker, want)
	}
	if want := []string{string(StatusException), string(StatusInvalidOutput), string(StatusOutputLimit)}; !reflect.DeepEqual(py.Kinds, want) {
		t.Errorf("error kinds %q; want %q", py.Kinds, want)
	}
}

// TestFrameCapMirror checks that the child computes the frame cap as the host does,
// so that it refuses the calls whose frames the host would not read.
func TestFrameCapMirror(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if err := python.Install(dir); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(pythonPath, "-I", "-c", `import sys
sys.path.insert(0, sys.argv[1])
from kiln import program_channel
print(program_channel.frame_cap(65536, 32768), program_channel.frame_cap(100, 20 << 20))`, dir).Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	want := fmt.Sprintln(FrameCap(Limits{MaxLogBytes: 65536, MaxValueBytes: 32768}), FrameCap(Limits{MaxLogBytes: 100, MaxValueBytes: 20 << 20}))
	if string(out) != want {
		t.Errorf("the child's frame caps %q; want %q", out, want)
	}
}
