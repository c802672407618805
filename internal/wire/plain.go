package wire

import (
	"bytes"
	"strconv"

	"github.com/go-json-experiment/json/jsontext"
)

// decodePlain accepts the two frames a host reads most, a cell's completion and a host
// request, when they are written member for member in the shape the worker writes them
// (no space, members in the schema's order) and every rule plainly holds, at a fraction
// of the general judge's cost: the payload is checked once as strict JSON, then walked.
// It accepts only what Decode's full judgement accepts, with the same result; anything
// else returns false and is judged in full (FuzzDecode checks the agreement).
func decodePlain(payload []byte, want Expect) (Envelope, bool) {
	if !ValidIdentifier(want.SessionID) || !ValidIdentifier(want.Generation) {
		return Envelope{}, false
	}
	s := plainScan{p: payload}
	s.literal(`{"version":1,"session_id":"`)
	s.literal(want.SessionID)
	s.literal(`","generation":"`)
	s.literal(want.Generation)
	s.literal(`","message":{"kind":"`)
	if s.failed || !jsontext.Value(payload).IsValid() {
		return Envelope{}, false
	}
	var msg Message
	switch {
	case s.next(`completed","id":"`):
		msg = s.completion()
	case s.next(`host_request","id":"`):
		msg = s.hostRequest()
	default:
		return Envelope{}, false
	}
	if s.failed || s.i != len(payload) {
		return Envelope{}, false
	}
	return Envelope{SessionID: want.SessionID, Generation: want.Generation, Message: msg}, true
}

// plainScan walks a payload that is valid JSON as a whole, expecting one exact shape;
// the first thing out of place sets failed, and every step after it does nothing.
type plainScan struct {
	p      []byte
	i      int
	failed bool
}

// literal consumes text, which must come next.
func (s *plainScan) literal(text string) {
	if !s.next(text) {
		s.failed = true
	}
}

// next consumes text if it comes next, and reports whether it did.
func (s *plainScan) next(text string) bool {
	if s.failed || !bytes.HasPrefix(s.p[s.i:], []byte(text)) {
		return false
	}
	s.i += len(text)
	return true
}

// identifier consumes the characters of an identifier, up to the quote that closes it;
// anything else in the string (an escape among them) fails.
func (s *plainScan) identifier() string {
	if s.failed {
		return ""
	}
	end := bytes.IndexByte(s.p[s.i:], '"')
	if end < 0 || !ValidIdentifier(string(s.p[s.i:s.i+end])) {
		s.failed = true
		return ""
	}
	id := string(s.p[s.i : s.i+end])
	s.i += end
	return id
}

// value consumes one JSON value of the kind given (its first byte, as jsontext.Kind
// names it: '"', '{', '0'…) and returns its text.
func (s *plainScan) value(kind jsontext.Kind) jsontext.Value {
	if s.failed || s.i >= len(s.p) || jsontext.Value(s.p[s.i:s.i+1]).Kind() != kind {
		s.failed = true
		return nil
	}
	start := s.i
	s.i = valueEnd(s.p, s.i)
	return s.p[start:s.i]
}

// hostRequest is the rest of a host request, after its id's opening quote.
func (s *plainScan) hostRequest() Message {
	id := s.identifier()
	s.literal(`","execution_id":"`)
	execution := s.identifier()
	s.literal(`","request":`)
	request := s.value('{')
	s.literal(`}}`)
	return HostRequest{ID: id, ExecutionID: execution, Request: bytes.Clone(request)}
}

// completion is the rest of a cell's completion, after its id's opening quote.
func (s *plainScan) completion() Message {
	id := s.identifier()
	s.literal(`","result":{"kind":"` + ResultCell + `","status":"`)
	res := Result{Kind: ResultCell, Status: s.identifier()}
	switch res.Status {
	case StatusOK, StatusError, StatusYielded, StatusInterrupted:
	default:
		s.failed = true
	}
	s.literal(`","output":[`)
	total := 0
	for !s.failed && !s.next(`]`) {
		if len(res.Output) > 0 {
			s.literal(`,`)
		}
		s.literal(`{"stream":"`)
		out := Output{Stream: s.identifier()}
		switch out.Stream {
		case StreamStdout, StreamStderr, StreamResult:
		default:
			s.failed = true
		}
		s.literal(`","text":`)
		if text := s.value('"'); !s.failed {
			out.Text = unquote(text)
		}
		s.literal(`}`)
		if total += len(out.Text); total > MaxOutputBytes || len(res.Output) == MaxOutputRecords {
			s.failed = true
		}
		res.Output = append(res.Output, out)
	}
	if res.Output == nil {
		res.Output = []Output{}
	}
	s.literal(`,"truncated_bytes":`)
	truncated := s.value('0')
	if !s.failed {
		n, err := strconv.ParseInt(string(truncated), 10, 64)
		s.failed = !isInteger(truncated) || err != nil || n < 0
		res.TruncatedBytes = n
	}
	s.literal(`,"error":`)
	if !s.next(`null`) {
		if text := s.value('"'); !s.failed {
			message := unquote(text)
			s.failed = len(message) > MaxErrorBytes
			res.Error = &message
		}
	}
	s.literal(`}}}`)
	return Completed{ID: id, Result: res}
}
