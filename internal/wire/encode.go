package wire

import (
	"fmt"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/jsonbuf"
)

// Encode returns the JSON payload of env. It checks identifiers so that a frame kiln
// writes is one its own decoder accepts.
func Encode(env Envelope) ([]byte, error) {
	if !ValidIdentifier(env.SessionID) || !ValidIdentifier(env.Generation) {
		return nil, fmt.Errorf("wire: encode: invalid identity %q/%q", env.SessionID, env.Generation)
	}
	if env.Message == nil {
		return nil, fmt.Errorf("wire: encode: no message")
	}
	switch m := env.Message.(type) {
	case HostReply:
		if m.Reply.Kind == ReplyOK && ValidIdentifier(m.ID) && ValidIdentifier(m.ExecutionID) {
			return encodeOKReply(env, m)
		}
	}
	return encodeGeneral(env)
}

// encodeGeneral is Encode for any message.
func encodeGeneral(env Envelope) ([]byte, error) {
	body, err := json.Marshal(env.Message)
	if err != nil {
		return nil, fmt.Errorf("wire: encode %s: %w", env.Message.Kind(), err)
	}
	// body is a JSON object; the kind goes in front of its members.
	buf := make([]byte, 0, len(body)+96)
	buf = fmt.Appendf(buf, `{"version":%d,"session_id":%q,"generation":%q,"message":{"kind":%q`,
		Version, env.SessionID, env.Generation, env.Message.Kind())
	if len(body) > 2 {
		buf = append(buf, ',')
	}
	buf = append(buf, body[1:]...)
	return append(buf, '}'), nil
}

// encodeOKReply is Encode for an ok host reply, the frame a host writes most: the same
// bytes, without the general encoder's reflection. It stays because it won its A/B
// against its removal (docs/host.md, "CPUs"); the execute's own encoder did not.
func encodeOKReply(env Envelope, m HostReply) ([]byte, error) {
	value := orNull(m.Reply.Value)
	b := plainMessage(env, "host_reply", m.ID, len(value))
	b.Raw(`,"execution_id":"`)
	b.Raw(m.ExecutionID)
	b.Raw(`","reply":{"kind":"ok","value":`)
	b.Value(value)
	b.Raw("}}}")
	return plainBytes(b, "host_reply")
}

// plainMessage begins the payload of a message of kind kind and identifier id, up to
// its id, with room for size bytes more; the identity and id are identifiers, which
// need no escaping.
func plainMessage(env Envelope, kind, id string, size int) *jsonbuf.Buffer {
	b := jsonbuf.New(make([]byte, 0, size+160))
	b.Raw(`{"version":`)
	b.Int(Version)
	for _, part := range [...]string{`,"session_id":"`, env.SessionID, `","generation":"`, env.Generation,
		`","message":{"kind":"`, kind, `","id":"`, id, `"`} {
		b.Raw(part)
	}
	return b
}

// plainBytes is the payload b built for a message of kind kind, or why it could not be.
func plainBytes(b *jsonbuf.Buffer, kind string) ([]byte, error) {
	payload, err := b.Bytes()
	if err != nil {
		return nil, fmt.Errorf("wire: encode %s: %w", kind, err)
	}
	return payload, nil
}

// AppendEnvelope appends env to dst as one frame.
func AppendEnvelope(dst []byte, env Envelope) ([]byte, error) {
	payload, err := Encode(env)
	if err != nil {
		return dst, err
	}
	return AppendFrame(dst, payload)
}

// orNull is v, or the JSON null when v is empty.
func orNull(v jsontext.Value) jsontext.Value {
	if len(v) == 0 {
		return jsontext.Value("null")
	}
	return v
}

// MarshalJSON writes the reply in the shape its kind names.
func (r Reply) MarshalJSON() ([]byte, error) {
	switch r.Kind {
	case ReplyOK:
		return json.Marshal(struct {
			Kind  string         `json:"kind"`
			Value jsontext.Value `json:"value"`
		}{r.Kind, orNull(r.Value)})
	case ReplyError:
		return json.Marshal(struct {
			Kind    string `json:"kind"`
			Code    string `json:"code"`
			Message string `json:"message"`
		}{r.Kind, r.Code, r.Message})
	}
	return nil, fmt.Errorf("wire: unknown reply kind %q", r.Kind)
}

// completionOutput is an output record of a cell result on the wire.
type completionOutput struct {
	Stream string  `json:"stream"`
	Text   *string `json:"text,omitzero"`
}

// MarshalJSON writes the result in the shape its kind names.
func (r Result) MarshalJSON() ([]byte, error) {
	switch r.Kind {
	case ResultCell:
		// As a completion carries them: a text record with its text, even empty; a
		// display's place with its stream alone.
		output := make([]completionOutput, len(r.Output))
		for i := range r.Output {
			output[i].Stream = r.Output[i].Stream
			if output[i].Stream != StreamDisplay {
				output[i].Text = &r.Output[i].Text
			}
		}
		return json.Marshal(struct {
			Kind           string             `json:"kind"`
			Status         string             `json:"status"`
			Output         []completionOutput `json:"output"`
			TruncatedBytes int64              `json:"truncated_bytes"`
			Error          *string            `json:"error"`
			Exception      *Exception         `json:"exception,omitempty"`
		}{r.Kind, r.Status, output, r.TruncatedBytes, r.Error, r.Exception})
	case ResultHook:
		return json.Marshal(struct {
			Kind  string         `json:"kind"`
			Value jsontext.Value `json:"value"`
		}{r.Kind, orNull(r.Value)})
	case ResultCompletion:
		matches := r.Matches
		if matches == nil {
			matches = []string{}
		}
		return json.Marshal(struct {
			Kind    string   `json:"kind"`
			Matches []string `json:"matches"`
		}{r.Kind, matches})
	case ResultFailed:
		text := ""
		if r.Error != nil {
			text = *r.Error
		}
		return json.Marshal(struct {
			Kind  string `json:"kind"`
			Error string `json:"error"`
		}{r.Kind, text})
	}
	return nil, fmt.Errorf("wire: unknown result kind %q", r.Kind)
}
