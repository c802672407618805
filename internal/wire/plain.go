package wire

import (
	"bytes"
	"strconv"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// decodePlain accepts the two frames a host reads most, a cell's completion and a host
// request, when every rule plainly holds, at a fraction of the general judge's cost. It
// accepts only what Decode's full judgement accepts, with the same result; anything else
// returns false and is judged in full (FuzzDecode checks the agreement). The kind is
// looked for where the worker writes it, first in the message, to pick the shape.
func decodePlain(payload []byte, want Expect) (Envelope, bool) {
	head := make([]byte, 0, 64+len(want.SessionID)+len(want.Generation))
	head = append(head, `{"version":1,"session_id":"`...)
	head = append(head, want.SessionID...)
	head = append(head, `","generation":"`...)
	head = append(head, want.Generation...)
	head = append(head, `","message":{"kind":"`...)
	rest, ok := bytes.CutPrefix(payload, head)
	switch {
	case !ok:
		return Envelope{}, false
	case bytes.HasPrefix(rest, []byte(`completed"`)):
		return decodePlainCompletion(payload, want)
	case bytes.HasPrefix(rest, []byte(`host_request"`)):
		return decodePlainHostRequest(payload, want)
	}
	return Envelope{}, false
}

// plainHead is the envelope's members around the message, for the plain decoders.
type plainHead struct {
	Version    jsontext.Value `json:"version"`
	SessionID  string         `json:"session_id"`
	Generation string         `json:"generation"`
}

// matches reports whether the envelope is of version 1 and of the identity want.
func (h *plainHead) matches(want Expect) bool {
	return string(h.Version) == "1" && h.SessionID == want.SessionID && h.Generation == want.Generation &&
		ValidIdentifier(h.SessionID) && ValidIdentifier(h.Generation)
}

// plainHostRequest is the shape of a host request, for decodePlainHostRequest.
type plainHostRequest struct {
	plainHead
	Message struct {
		Kind        string         `json:"kind"`
		ID          string         `json:"id"`
		ExecutionID string         `json:"execution_id"`
		Request     jsontext.Value `json:"request"`
	} `json:"message"`
}

// decodePlainHostRequest is decodePlain for a host request.
func decodePlainHostRequest(payload []byte, want Expect) (Envelope, bool) {
	var p plainHostRequest
	if json.Unmarshal(payload, &p, strict) != nil {
		return Envelope{}, false
	}
	m := &p.Message
	if !p.matches(want) || m.Kind != "host_request" || !ValidIdentifier(m.ID) || !ValidIdentifier(m.ExecutionID) || m.Request.Kind() != '{' {
		return Envelope{}, false
	}
	return Envelope{SessionID: p.SessionID, Generation: p.Generation,
		Message: HostRequest{ID: m.ID, ExecutionID: m.ExecutionID, Request: m.Request}}, true
}

// plainCompletion is the shape of a cell's completion, for decodePlainCompletion. Members
// whose absence a zero value would hide are raw values, checked to be present.
type plainCompletion struct {
	plainHead
	Message struct {
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

// strict is how the plain decoders read: no unknown or duplicate members, valid
// UTF-8, names matched exactly.
var strict = json.JoinOptions(json.RejectUnknownMembers(true), jsontext.AllowDuplicateNames(false),
	jsontext.AllowInvalidUTF8(false), json.MatchCaseInsensitiveNames(false))

// decodePlainCompletion is decodePlain for a cell's completion.
func decodePlainCompletion(payload []byte, want Expect) (Envelope, bool) {
	var p plainCompletion
	if json.Unmarshal(payload, &p, strict) != nil {
		return Envelope{}, false
	}
	m, r := &p.Message, &p.Message.Result
	if !p.matches(want) || m.Kind != "completed" || !ValidIdentifier(m.ID) || r.Kind != ResultCell || r.Output == nil {
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
