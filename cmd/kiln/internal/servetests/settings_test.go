package servetests

import (
	"os"
	"strings"
	"testing"

	"github.com/kilnrt/kiln/cmd/kiln/internal/clitest"
	"github.com/kilnrt/kiln/internal/session"
)

// TestTheDaemonDecidesWhatAFoundSessionDiffers: creating a session that is open, asking
// settings it holds otherwise, is 409 settings_differ, naming each setting, asked and
// held; asking the same or none is 409 session_exists, which a client attaches to. The
// tool timeout is the session's own: a later create neither changes it nor is refused
// for it. kiln exec says what the daemon says.
func TestTheDaemonDecidesWhatAFoundSessionDiffers(t *testing.T) {
	t.Parallel()
	dir := clitest.ShortTemp(t)
	s := clitest.StartServe(t, dir)
	s.Call("POST", "/v1/sessions", `{"id":"f","limits":{"cpu_seconds":5,"wall_ms":60000,"tool_timeout_ms":5000}}`, 201, nil)
	type difference struct {
		Setting string `json:"setting"`
		Asked   any    `json:"asked"`
		Held    any    `json:"held"`
	}
	var p struct {
		Code        string       `json:"code"`
		Detail      string       `json:"detail"`
		Differences []difference `json:"differences"`
	}
	s.Call("POST", "/v1/sessions", `{"id":"f","python":"/no/such/python3","limits":{"cpu_seconds":7,"wall_ms":60000,"tool_timeout_ms":9000}}`, 409, &p)
	if p.Code != "settings_differ" || len(p.Differences) != 2 {
		t.Fatalf("other settings: %+v; want settings_differ naming python and limits.cpu_seconds", p)
	}
	python := session.DefaultPython(os.Getenv) // it named none: it runs the daemon's
	if d := p.Differences[0]; d != (difference{"python", "/no/such/python3", python}) {
		t.Errorf("the python asked otherwise: %+v", d)
	}
	if d := p.Differences[1]; d != (difference{"limits.cpu_seconds", float64(7), float64(5)}) {
		t.Errorf("the limit asked otherwise: %+v", d)
	}
	if want := `session f is open with python "` + python + `", not "/no/such/python3", limits.cpu_seconds 5, not 7`; p.Detail != want {
		t.Errorf("the detail: %q; want %q", p.Detail, want)
	}
	p.Differences = nil
	s.Call("POST", "/v1/sessions", `{"id":"f","python":"`+python+`"}`, 409, &p)
	if p.Code != "session_exists" || p.Differences != nil {
		t.Errorf("naming the python it runs: %+v; want session_exists", p)
	}

	p.Differences = nil
	s.Call("POST", "/v1/sessions", `{"id":"f","limits":{"cpu_seconds":5,"tool_timeout_ms":9000}}`, 409, &p)
	if p.Code != "session_exists" || p.Differences != nil {
		t.Errorf("the same settings and another tool timeout: %+v; want session_exists", p)
	}
	var info struct {
		Config struct {
			Limits struct {
				ToolTimeoutMS int64 `json:"tool_timeout_ms"`
			} `json:"limits"`
		} `json:"config"`
	}
	s.Call("GET", "/v1/sessions/f", "", 200, &info)
	if info.Config.Limits.ToolTimeoutMS != 5000 {
		t.Errorf("the tool timeout after a create that asked another: %d; want the session's own, 5000", info.Config.Limits.ToolTimeoutMS)
	}

	out, err := clitest.Command(t, "exec", "--data", dir, "--session", "f", "--cpu-seconds", "7", "1").CombinedOutput()
	if want := "session f is open with limits.cpu_seconds 5, not 7; stop it first (kiln sessions stop f)"; err == nil || !strings.Contains(string(out), want) {
		t.Errorf("kiln exec asking another limit: %v\n%s\nwant %q", err, out, want)
	}
	if out := clitest.Out(t, "exec", "--data", dir, "--session", "f", "--cpu-seconds", "5", "6 * 7"); out != "42\n" {
		t.Errorf("kiln exec asking the same limit: %q; want it attached", out)
	}
}
