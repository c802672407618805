package wire

import (
	"strconv"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// plainCompletion is the shape of a cell's completion, for decodePlainCompletion. Members
// whose absence a zero value would hide are raw values, checked to be present.
type plainCompletion struct {
	Version    jsontext.Value `json:"version"`
	SessionID  string         `json:"session_id"`
	Generation string         `json:"generation"`
	Message    struct {
		Kind   string `json:"kind"`
		ID     string `json:"id"`
		Result struct {
			Kind   string `json:"kind"`
			Status string `json:"status"`
			Output []struct {
				Stream string  `json:"stream"`
				Text   *string `json:"text"`
			} `json:"output"`
			TruncatedBytes jsontext.Value `json:"truncated_bytes"`
			Error          jsontext.Value `json:"error"`
		} `json:"result"`
	} `json:"message"`
}

// strict is how decodePlainCompletion reads: no unknown or duplicate members, valid
// UTF-8, names matched exactly.
var strict = json.JoinOptions(json.RejectUnknownMembers(true), jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false), json.MatchCaseInsensitiveNames(false))

// decodePlainCompletion accepts a cell's completion, the frame a host reads after every
// cell, when every rule plainly holds, at a fraction of the general judge's cost. It
// accepts only what Decode's full judgement accepts, with the same result; anything
// else returns false and is judged in full (FuzzDecode checks the agreement).
func decodePlainCompletion(payload []byte, want Expect) (Envelope, bool) {
	var p plainCompletion
	if json.Unmarshal(payload, &p, strict) != nil {
		return Envelope{}, false
	}
	m, r := &p.Message, &p.Message.Result
	if string(p.Version) != "1" || p.SessionID != want.SessionID || p.Generation != want.Generation ||
		!ValidIdentifier(p.SessionID) || !ValidIdentifier(p.Generation) ||
		m.Kind != "completed" || !ValidIdentifier(m.ID) || r.Kind != ResultCell || r.Output == nil {
		return Envelope{}, false
	}
	switch r.Status {
	case StatusOK, StatusError, StatusYielded, StatusInterrupted:
	default:
		return Envelope{}, false
	}
	if len(r.Output) > MaxOutputRecords || !isInteger(r.TruncatedBytes) || len(r.Error) == 0 {
		return Envelope{}, false
	}
	truncated, err := strconv.ParseInt(string(r.TruncatedBytes), 10, 64)
	if err != nil || truncated < 0 {
		return Envelope{}, false
	}
	res := Result{Kind: ResultCell, Status: r.Status, Output: make([]Output, len(r.Output)), TruncatedBytes: truncated}
	total := 0
	for i, o := range r.Output {
		switch o.Stream {
		case StreamStdout, StreamStderr, StreamResult:
		default:
			return Envelope{}, false
		}
		if o.Text == nil {
			return Envelope{}, false
		}
		if total += len(*o.Text); total > MaxOutputBytes {
			return Envelope{}, false
		}
		res.Output[i] = Output{Stream: o.Stream, Text: *o.Text}
	}
	if r.Error.Kind() != 'n' {
		if r.Error.Kind() != '"' {
			return Envelope{}, false
		}
		text := unquote(r.Error)
		if len(text) > MaxErrorBytes {
			return Envelope{}, false
		}
		res.Error = &text
	}
	return Envelope{SessionID: p.SessionID, Generation: p.Generation, Message: Completed{ID: m.ID, Result: res}}, true
}
