package serve

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrSettings is a session created again, while it is open, asking a setting it holds
// otherwise: its settings are fixed while it is open. The error is a *SettingsError.
var ErrSettings = errors.New("serve: the session is open with other settings")

// Difference is a setting a request asks otherwise than the open session holds.
type Difference struct {
	Setting string `json:"setting"` // as "sandbox" or "limits.memory_bytes"
	Asked   any    `json:"asked"`   // a string, or a limit's number
	Held    any    `json:"held"`
}

// String names the setting as "SETTING HELD, not ASKED", a text quoted.
func (d Difference) String() string {
	return fmt.Sprintf("%s %s, not %s", d.Setting, show(d.Held), show(d.Asked))
}

// show is a setting's value as String writes it.
func show(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	return fmt.Sprint(v)
}

// SettingsError is ErrSettings for session ID, with what it holds otherwise.
type SettingsError struct {
	ID          string
	Differences []Difference
}

// Detail says which settings the session holds otherwise, as "session ID is open with
// D1, D2".
func (e *SettingsError) Detail() string {
	d := make([]string, len(e.Differences))
	for i, x := range e.Differences {
		d[i] = x.String()
	}
	return fmt.Sprintf("session %s is open with %s", e.ID, strings.Join(d, ", "))
}

func (e *SettingsError) Error() string { return "serve: " + e.Detail() }

// Is makes errors.Is(err, ErrSettings) hold.
func (e *SettingsError) Is(target error) bool { return target == ErrSettings }

// Differs lists the settings want gives (not zero) that c holds otherwise: a session
// open with c cannot be attached to as want asks. Its agent's route and instructions
// are not among them (an agent's client checks those), nor is its tool timeout: that
// is the session's own, which a later create neither changes nor is refused for.
func (c Config) Differs(want Config) []Difference {
	var d []Difference
	for _, f := range []struct {
		name       string
		want, have string
	}{{"python", want.Python, c.Python}, {"cwd", want.Cwd, c.Cwd}, {"sandbox", want.Sandbox, c.Sandbox},
		{"network", want.Network, c.Network}} {
		if f.want != "" && f.want != f.have {
			d = append(d, Difference{Setting: f.name, Asked: f.want, Held: f.have})
		}
	}
	asked := want.Limits
	asked.ToolTimeoutMS = 0
	for _, l := range c.Limits.Differs(asked) {
		d = append(d, Difference{Setting: "limits." + l.Key, Asked: l.Asked, Held: l.Held})
	}
	return d
}
