package transcript

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/wire"
)

// Roles of the messages a transcript renders to.
const (
	RoleSystem    = "system"    // the pinned header
	RoleUser      = "user"      // inputs, and observations of a changed header
	RoleAssistant = "assistant" // a cell the agent wrote
	RoleTool      = "tool"      // what running a cell gave
)

// Message is one rendered block, as a model reads it.
type Message struct {
	Seq     int64  `json:"seq"` // the record it renders
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Stamp renders an instant as the transcript does: RFC 3339 in UTC, to the second, with
// Z. A zero instant, or one at or before the Unix epoch, is "time unknown".
func Stamp(t time.Time) string {
	if t.IsZero() || t.UnixMilli() <= 0 {
		return "time unknown"
	}
	return t.UTC().Format("2006-01-02T15:04:05Z")
}

// Ran renders how long a cell ran: milliseconds below ten seconds, then tenths of seconds.
func Ran(d time.Duration) string {
	if d < 10*time.Second {
		return fmt.Sprintf("%dms", d.Milliseconds())
	}
	return d.Round(100 * time.Millisecond).String()
}

// Input is an input event as the transcript frames it: its source, when it arrived, and
// the payload exactly as it arrived.
type Input struct {
	Source     string
	ReceivedAt time.Time
	Payload    jsontext.Value
}

// NoText is what an input shows whose payload has no text: its other members are never
// shown.
const NoText = "(no text)"

// RenderInput frames an input: "[<stamp> · <label>]", a newline, then the sender's own
// words: the payload's text (a string), or NoText when it has none; no other member of
// the payload is ever shown. The label is the event's source, or "peer request <id> from
// <session>" for a payload whose peer_request names an id — "peer result <id> from
// <session>" (with its state when not completed) for a peer_result, "peer cancel <id>
// from <session>" for a peer_cancel; an id, session or state that is not an identifier
// is quoted, so that it cannot end the frame or begin another. Each member
// is read on its own: one of the wrong type does not hide the others.
func RenderInput(in Input) string {
	label, content := in.Source, NoText
	var members map[string]jsontext.Value
	if json.Unmarshal(in.Payload, &members) == nil {
		if v := members["text"]; v.Kind() == '"' {
			json.Unmarshal(v, &content)
		}
		for _, kind := range []string{"request", "result", "cancel"} {
			var peer struct {
				ID      string `json:"id"`
				Session string `json:"session"`
				State   string `json:"state"`
			}
			if json.Unmarshal(members["peer_"+kind], &peer) == nil && peer.ID != "" {
				label = fmt.Sprintf("peer %s %s from %s", kind, labelPart(peer.ID), labelPart(peer.Session))
				if kind == "result" && peer.State != "" && peer.State != "completed" {
					label += " · " + labelPart(peer.State)
				}
				break
			}
		}
	}
	return fmt.Sprintf("[%s · %s]\n%s", Stamp(in.ReceivedAt), label, Unframed(content))
}

// labelPart is s as a frame's label shows it: as it is when it is an identifier, quoted
// otherwise.
func labelPart(s string) string {
	if wire.ValidIdentifier(s) {
		return s
	}
	return strconv.Quote(s)
}

// Unframed is text as a frame's body shows it: a line that would read as a frame of its
// own — "[", then " · " somewhere, then "]" at its end — is shown after a backslash, so
// that output or words cannot pass for the host's frame of an input or a result.
func Unframed(text string) string {
	if !strings.Contains(text, " · ") {
		return text
	}
	lines := strings.SplitAfter(text, "\n")
	changed := false
	for i, l := range lines {
		body := strings.TrimSuffix(l, "\n")
		if strings.HasPrefix(body, "[") && strings.HasSuffix(body, "]") && strings.Contains(body, " · ") {
			lines[i], changed = "\\"+l, true
		}
	}
	if !changed {
		return text
	}
	return strings.Join(lines, "")
}

// ToolResult is what running a cell gave: the instant it was observed, how long the cell
// ran (nil when none ran), and its output and error text.
type ToolResult struct {
	At     time.Time
	Ran    *time.Duration
	Status string
	Output string
	Error  string
}

// RenderToolResult frames a tool result: "[<stamp> · ran 420ms]", then its status line
// when not ok, its output, and its error text, each Unframed.
func RenderToolResult(r ToolResult) string {
	var b strings.Builder
	b.WriteString("[" + Stamp(r.At))
	if r.Ran != nil {
		b.WriteString(" · ran " + Ran(*r.Ran))
	}
	b.WriteString("]\n")
	if r.Status != "" && r.Status != "ok" {
		b.WriteString("status: " + r.Status + "\n")
	}
	b.WriteString(Unframed(r.Output))
	if r.Error != "" {
		if r.Output != "" && !strings.HasSuffix(r.Output, "\n") {
			b.WriteString("\n")
		}
		b.WriteString(Unframed(r.Error))
	}
	return b.String()
}

// RenderObservation renders a header revision where it was noticed: the stamp, what
// changed and by whom, the explanatory line, then the verified patch that reaches the
// current text, or the current text itself. A change of no patches renames the sources
// of an unchanged text, and says so.
func RenderObservation(rev Revision) string {
	var b strings.Builder
	observationLine(&b, rev)
	b.WriteString("the header of this transcript is the revision it started under; the text below is current from here on.\n")
	if rev.Change.Form == FormDiff && len(rev.Change.Patches) == 0 {
		names := make([]string, len(rev.Sources))
		for i, src := range rev.Sources {
			names[i] = src.Name
		}
		b.WriteString("the text is unchanged; its sources are now " + strings.Join(names, ", ") + ".\n")
		return b.String()
	}
	if rev.Change.Form == FormDiff {
		for _, p := range rev.Change.Patches {
			fmt.Fprintf(&b, "@@ %s, line %d @@\n", p.Source, p.StartLine)
			for _, l := range p.OldLines {
				b.WriteString("-" + withNewline(l))
			}
			for _, l := range p.NewLines {
				b.WriteString("+" + withNewline(l))
			}
		}
		return b.String()
	}
	if rev.Change.Text != nil {
		b.WriteString(*rev.Change.Text)
	}
	return b.String()
}

// RenderBrokenObservation renders a header revision that does not reconstruct its text,
// saying so and why, and showing nothing of what it claims.
func RenderBrokenObservation(rev Revision, problem string) string {
	var b strings.Builder
	observationLine(&b, rev)
	b.WriteString("this record does not reconstruct an instruction text (" + problem + "); what it claims is not shown.\n")
	return b.String()
}

// observationLine writes the first line of an observation: when, what and by whom.
func observationLine(b *strings.Builder, rev Revision) {
	fmt.Fprintf(b, "[%s · instructions changed for this runtime · %s]\n",
		Stamp(time.UnixMilli(rev.ObservedAtMs)), changedBy(rev.Actor))
}

func withNewline(line string) string {
	if strings.HasSuffix(line, "\n") {
		return line
	}
	return line + "\n\\ no newline at end\n"
}

// changedBy says who changed the text, from what the actor records and nothing more.
func changedBy(a Actor) string {
	if a.Origin == OriginSession && a.ExecutionID != "" {
		return "changed by execution " + a.ExecutionID
	}
	return "changed outside this transcript"
}
