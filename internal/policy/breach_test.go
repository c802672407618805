package policy

import (
	"context"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/worker"
)

// TestAHookThatMakesAHostRequestEndsItsGeneration: a hook has no runtime object; one
// that writes a host request on its worker's socket anyway ends its generation at once,
// and its decision falls back, saying why.
func TestAHookThatMakesAHostRequestEndsItsGeneration(t *testing.T) {
	data := dataDir(t)
	id := storeRelease(t, data, hooks("asks", `import gc, time
from kiln import wire
from kiln.hooks import HooksWorker
`, `w = next(o for o in gc.get_objects() if isinstance(o, HooksWorker))
    w._sock.sendall(wire.pack_frame(wire.encode(w._session_id, w._generation, "host_request",
        {"id": "q-1", "execution_id": "i-1", "request": {"method": "runtime.inspect"}})))
    time.sleep(30)`, "return Allow()"))
	p := New(Config{Python: pythonPath(t), SessionID: "s", ReleaseID: id, DataDir: data})
	defer p.Close()
	w, err := p.live(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	a := p.Plan(context.Background(), 1, SourceDiscordDM, 1)
	if a.Action != "defer" || !strings.Contains(a.Note, `a hooks worker sent "host_request"`) {
		t.Errorf("the decision of a hook that made a host request: %+v; want the fallback, the breach named", a)
	}
	if w.State() != worker.Dead {
		t.Error("the generation outlived its breach")
	}
}
