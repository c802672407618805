package remote_test

import (
	"testing"

	"github.com/kilnrt/kiln/internal/api"
	"github.com/kilnrt/kiln/internal/remote"
)

func TestProblemCodesAreTheAPIs(t *testing.T) {
	want := map[string]string{"no_session": api.CodeNoSession, "no_execution": api.CodeNoExecution, "exists": api.CodeExists,
		"stopped": api.CodeStopped, "busy": api.CodeBusy, "not_running": api.CodeNotRunning}
	for name, code := range want {
		if got := remote.ProblemCodes[name]; got != code {
			t.Errorf("%s: got %q; want %q", name, got, code)
		}
	}
}
