package worker

import (
	"context"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/internal/wire"
)

// hooksPrelude says hello as a hooks worker of release r-1.
const hooksPrelude = forgePrelude + `send({"kind": "hello", "token": token, "role": "hooks", "revision": "r-1",
    "slots": ["attention.plan", "delivery.review"]})
`

// TestAHooksWorkerThatSendsWhatOnlyAWorkbenchSendsIsEnded: a hooks worker has no
// runtime object and runs no cell, so a host request, output or display from it ends
// its generation at once, and nothing is answered. The forger waits for what the host
// sends back: a reply makes it exit saying so, which the cause would then name.
func TestAHooksWorkerThatSendsWhatOnlyAWorkbenchSendsIsEnded(t *testing.T) {
	for kind, message := range map[string]string{
		"host_request": `{"kind": "host_request", "id": "q-1", "execution_id": "stray", "request": {"method": "x" * 1000}}`,
		"output":       `{"kind": "output", "execution_id": "i-1", "stream": "stdout", "text": "hi"}`,
		"display":      `{"kind": "display", "execution_id": "i-1", "data": {"text/plain": "hi"}, "dropped": 0}`,
	} {
		t.Run(kind, func(t *testing.T) {
			script := hooksPrelude + "send(" + message + ")\n" +
				"if s.recv(65536):\n    sys.stderr.write('the host answered\\n'); sys.exit(3)\n"
			w, err := Start(context.Background(), Config{SessionID: "s", Generation: "h-1", Role: wire.RoleHooks,
				ReleaseID: "r-1", Python: fakeInterpreter(t, script)})
			if err != nil {
				t.Fatal(err)
			}
			<-w.Done()
			if err := w.Err(); err == nil || !strings.Contains(err.Error(), "a hooks worker sent \""+kind+"\"") {
				t.Errorf("the generation ended with %v; want the breach named", err)
			}
		})
	}
}
