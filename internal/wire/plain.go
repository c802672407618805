package wire

import (
	"bytes"

	"github.com/go-json-experiment/json/jsontext"
)

// decodePlain accepts the frame a host reads most often, a host request, when it is
// written member for member in the shape the worker writes it (no space, members in the
// schema's order) and every rule plainly holds, at a fraction of the general judge's
// cost: the payload is checked once as strict JSON, then walked. It accepts only what
// Decode's full judgement accepts, with the same result; anything else returns false and
// is judged in full (FuzzDecode checks the agreement). It stays because it won its A/B
// against its removal (docs/host.md, "CPUs"); a cell's completion, whose shortcut did
// not, is judged in full.
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
	if !s.next(`host_request","id":"`) {
		return Envelope{}, false
	}
	msg := s.hostRequest()
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
