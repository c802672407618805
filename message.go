package kiln

import "github.com/go-json-experiment/json/jsontext"

// The roles of a transcript's messages.
const (
	RoleSystem    = "system"    // the instruction header the session pinned
	RoleUser      = "user"      // an input, or an observation that the instruction text changed
	RoleAssistant = "assistant" // a cell
	RoleTool      = "tool"      // what running a cell gave
	RoleModel     = "model"     // a model call of the session's agent, which no model reads
)

// Message is one message of a session's transcript, as kiln transcript show --json
// prints it.
type Message struct {
	Seq     int64  `json:"seq"` // the log entry it renders
	Role    string `json:"role"`
	Content string `json:"content"`
	// Call is a model call's record (RoleModel only): the body of its log entry.
	Call jsontext.Value `json:"call,omitzero"`
}
