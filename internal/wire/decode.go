package wire

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
)

// Reason says what rule a payload broke.
type Reason string

// The reasons a payload is refused, in the order docs/protocol.md gives.
const (
	ReasonSyntax    Reason = "syntax"    // not one strict JSON value in valid UTF-8
	ReasonDuplicate Reason = "duplicate" // an object names one member twice
	ReasonType      Reason = "type"      // a value of the wrong JSON type, or null where none is allowed
	ReasonUnknown   Reason = "unknown"   // a member the object's field set does not have
	ReasonMissing   Reason = "missing"   // a required member is absent
	ReasonValue     Reason = "value"     // the right type, but a value the rules refuse
	ReasonMismatch  Reason = "mismatch"  // a version or identity other than the reader expects
)

// DecodeError is a refused payload: where (a JSON pointer; empty for the whole payload)
// and why.
type DecodeError struct {
	Pointer string
	Reason  Reason
	Detail  string
}

func (e *DecodeError) Error() string {
	where := e.Pointer
	if where == "" {
		where = "payload"
	}
	return fmt.Sprintf("wire: %s: %s: %s", where, e.Reason, e.Detail)
}

// Expect is the identity a reader requires of every envelope.
type Expect struct {
	SessionID  string `json:"session_id"`
	Generation string `json:"generation"`
}

// Decode judges payload strictly and returns its envelope. A refusal is a *DecodeError.
func Decode(payload []byte, want Expect) (Envelope, error) {
	if env, ok := decodePlain(payload, want); ok {
		return env, nil
	}
	return judge(payload, want)
}

// judge is the full judgement of a payload, in the order docs/protocol.md gives.
func judge(payload []byte, want Expect) (Envelope, error) {
	if err := validJSON(payload); err != nil {
		return Envelope{}, err
	}
	var env Envelope
	var msg jsontext.Value
	err := decodeObject(bytes.TrimSpace(payload), "", []field{
		{"version", exactOne},
		{"session_id", identity(&env.SessionID, want.SessionID)},
		{"generation", identity(&env.Generation, want.Generation)},
		{"message", anyObject(&msg)},
	})
	if err != nil {
		return Envelope{}, err
	}
	env.Message, err = decodeMessage(msg, "/message")
	if err != nil {
		return Envelope{}, err
	}
	return env, nil
}

// validJSON checks that payload is exactly one strict JSON value.
func validJSON(payload []byte) error {
	if jsontext.Value(payload).IsValid() {
		return nil
	}
	dec := jsontext.NewDecoder(bytes.NewReader(payload))
	_, err := dec.ReadValue()
	if err == nil {
		if _, err = dec.ReadToken(); err == io.EOF {
			return nil
		} else if err == nil {
			err = errors.New("more than one value")
		}
	}
	if errors.Is(err, jsontext.ErrDuplicateName) {
		return &DecodeError{"", ReasonDuplicate, err.Error()}
	}
	return &DecodeError{"", ReasonSyntax, err.Error()}
}

// A field is one member of an object's schema and the check that decodes it.
type field struct {
	name  string
	check func(v jsontext.Value, ptr string) error
}

func refuse(ptr string, reason Reason, format string, args ...any) error {
	return &DecodeError{ptr, reason, fmt.Sprintf(format, args...)}
}

// members splits an object into its members, or refuses a value that is not an object.
func members(v jsontext.Value, ptr string) ([]member, error) {
	if v.Kind() != '{' {
		return nil, refuse(ptr, ReasonType, "want an object, got %s", kindName(v))
	}
	return objectMembers(v), nil
}

// array splits an array into its items, or refuses a value that is not an array.
func array(v jsontext.Value, ptr string) ([]jsontext.Value, error) {
	if v.Kind() != '[' {
		return nil, refuse(ptr, ReasonType, "want an array, got %s", kindName(v))
	}
	return arrayItems(v), nil
}

// lookup finds the member called name.
func lookup(m []member, name string) (jsontext.Value, bool) {
	for _, x := range m {
		if x.name == name {
			return x.value, true
		}
	}
	return nil, false
}

// decodeObject checks v against fields: unknown members, then missing ones, then each
// field in order.
func decodeObject(v jsontext.Value, ptr string, fields []field, skip ...string) error {
	m, err := members(v, ptr)
	if err != nil {
		return err
	}
	return checkMembers(m, ptr, fields, skip...)
}

func checkMembers(m []member, ptr string, fields []field, skip ...string) error {
	var unknown []string
	for _, x := range m {
		if !slices.Contains(skip, x.name) && !slices.ContainsFunc(fields, func(f field) bool { return f.name == x.name }) {
			unknown = append(unknown, x.name)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown) // Go compares bytes; for UTF-8 that is code point order
		return refuse(pointer(ptr, unknown[0]), ReasonUnknown, "unknown member")
	}
	var buf [8]jsontext.Value
	values := buf[:0]
	if len(fields) > len(buf) {
		values = make([]jsontext.Value, 0, len(fields))
	}
	values = values[:len(fields)]
	for i, f := range fields {
		v, ok := lookup(m, f.name)
		if !ok {
			return refuse(pointer(ptr, f.name), ReasonMissing, "required member absent")
		}
		values[i] = v
	}
	for i, f := range fields {
		if err := f.check(values[i], pointer(ptr, f.name)); err != nil {
			return err
		}
	}
	return nil
}

// decodeUnion checks an object whose "kind" selects its field set.
func decodeUnion(v jsontext.Value, ptr string, kinds func(kind string) []field) error {
	m, err := members(v, ptr)
	if err != nil {
		return err
	}
	raw, ok := lookup(m, "kind")
	if !ok {
		return refuse(pointer(ptr, "kind"), ReasonMissing, "required member absent")
	}
	var kind string
	if err := str(&kind)(raw, pointer(ptr, "kind")); err != nil {
		return err
	}
	fields := kinds(kind)
	if fields == nil {
		return refuse(pointer(ptr, "kind"), ReasonValue, "unknown kind %q", kind)
	}
	return checkMembers(m, ptr, fields, "kind")
}

func decodeMessage(v jsontext.Value, ptr string) (Message, error) {
	var msg Message
	err := decodeUnion(v, ptr, func(kind string) []field {
		switch kind {
		case "hello":
			m := &Hello{}
			msg = m
			return []field{{"token", ident(&m.Token)}, {"role", word(&m.Role, RoleWorkbench, RoleHooks)},
				{"revision", nullable(&m.Revision, ident)}, {"slots", identList(&m.Slots)}}
		case "execute":
			m := &Execute{}
			msg = m
			return []field{{"id", ident(&m.ID)}, {"code", text(&m.Code, MaxCodeBytes)}}
		case "invoke":
			m := &Invoke{}
			msg = m
			return []field{{"id", ident(&m.ID)}, {"slot", ident(&m.Slot)}, {"input", anyObject(&m.Input)}}
		case "host_request":
			m := &HostRequest{}
			msg = m
			return []field{{"id", ident(&m.ID)}, {"execution_id", ident(&m.ExecutionID)},
				{"request", anyObject(&m.Request)}}
		case "host_reply":
			m := &HostReply{}
			msg = m
			return []field{{"id", ident(&m.ID)}, {"execution_id", ident(&m.ExecutionID)},
				{"reply", reply(&m.Reply)}}
		case "completed":
			m := &Completed{}
			msg = m
			return []field{{"id", ident(&m.ID)}, {"result", result(&m.Result)}}
		case "complete":
			m := &Complete{}
			msg = m
			return []field{{"id", ident(&m.ID)}, {"text", text(&m.Text, MaxCompleteBytes)}}
		case "output":
			m := &OutputChunk{}
			msg = m
			return []field{{"execution_id", ident(&m.ExecutionID)},
				{"stream", word(&m.Stream, StreamStdout, StreamStderr)}, {"text", text(&m.Text, MaxOutputBytes)}}
		case "display":
			m := &Display{}
			msg = m
			return []field{{"execution_id", ident(&m.ExecutionID)}, {"data", displayData(&m.Data)},
				{"dropped", count(&m.Dropped)}}
		case "interrupt":
			m := &Interrupt{}
			msg = m
			return []field{{"id", ident(&m.ID)}}
		case "shutdown":
			msg = &Shutdown{}
			return []field{}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return derefMessage(msg), nil
}

// derefMessage hands messages out as values, the way callers build them.
func derefMessage(m Message) Message {
	switch m := m.(type) {
	case *Hello:
		return *m
	case *Execute:
		return *m
	case *Invoke:
		return *m
	case *HostRequest:
		return *m
	case *HostReply:
		return *m
	case *Completed:
		return *m
	case *OutputChunk:
		return *m
	case *Display:
		return *m
	case *Complete:
		return *m
	case *Interrupt:
		return *m
	case *Shutdown:
		return *m
	}
	panic(fmt.Sprintf("wire: message type %T has no value form", m))
}

func reply(dst *Reply) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		return decodeUnion(v, ptr, func(kind string) []field {
			dst.Kind = kind
			switch kind {
			case ReplyOK:
				return []field{{"value", anyValue(&dst.Value)}}
			case ReplyError:
				return []field{{"code", ident(&dst.Code)}, {"message", text(&dst.Message, 0)}}
			}
			return nil
		})
	}
}

func result(dst *Result) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		// A cell result's "exception" is optional: a field of the set only when present.
		_, parts := lookup(objectMembersOf(v), "exception")
		return decodeUnion(v, ptr, func(kind string) []field {
			dst.Kind = kind
			switch kind {
			case ResultCell:
				fields := []field{
					{"status", word(&dst.Status, StatusOK, StatusError, StatusYielded, StatusInterrupted)},
					{"output", output(&dst.Output)},
					{"truncated_bytes", count(&dst.TruncatedBytes)},
					{"error", nullable(&dst.Error, maxText(MaxErrorBytes))},
				}
				if parts {
					fields = append(fields, field{"exception", exception(&dst.Exception)})
				}
				return fields
			case ResultHook:
				return []field{{"value", anyValue(&dst.Value)}}
			case ResultFailed:
				return []field{{"error", stringPtr(&dst.Error, maxText(MaxErrorBytes))}}
			case ResultCompletion:
				return []field{{"matches", stringList(&dst.Matches, MaxMatches, maxText(MaxMatchBytes))}}
			}
			return nil
		})
	}
}

// objectMembersOf is v's members, or none when v is not an object.
func objectMembersOf(v jsontext.Value) []member {
	if v.Kind() != '{' {
		return nil
	}
	return objectMembers(v)
}

func exception(dst **Exception) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		e := &Exception{}
		if err := decodeObject(v, ptr, []field{{"type", text(&e.Type, MaxExceptionTypeBytes)},
			{"value", text(&e.Value, MaxErrorBytes)}, {"traceback", text(&e.Traceback, MaxErrorBytes)}}); err != nil {
			return err
		}
		*dst = e
		return nil
	}
}

// output decodes a cell's output records: at most MaxOutputRecords text records, their
// texts within MaxOutputBytes, and at most MaxDisplayItems places of displays
// ({"stream":"display"}, nothing else), in the order the cell made them.
func output(dst *[]Output) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		items, err := array(v, ptr)
		if err != nil {
			return err
		}
		if len(items) > MaxOutputRecords+MaxDisplayItems {
			return refuse(ptr, ReasonValue, "%d records, more than %d", len(items), MaxOutputRecords+MaxDisplayItems)
		}
		out := make([]Output, len(items))
		total, texts, places := 0, 0, 0
		for i, item := range items {
			p := ptr + "/" + strconv.Itoa(i)
			m, err := members(item, p)
			if err != nil {
				return err
			}
			if raw, ok := lookup(m, "stream"); ok && raw.Kind() == '"' && unquote(raw) == StreamDisplay {
				if err := checkMembers(m, p, []field{{"stream", str(&out[i].Stream)}}); err != nil {
					return err
				}
				if places++; places > MaxDisplayItems {
					return refuse(p, ReasonValue, "more than %d displays", MaxDisplayItems)
				}
				continue
			}
			err = checkMembers(m, p, []field{
				{"stream", word(&out[i].Stream, StreamStdout, StreamStderr, StreamResult)},
				{"text", text(&out[i].Text, 0)},
			})
			if err != nil {
				return err
			}
			if texts++; texts > MaxOutputRecords {
				return refuse(p, ReasonValue, "more than %d text records", MaxOutputRecords)
			}
			if total += len(out[i].Text); total > MaxOutputBytes {
				return refuse(p+"/text", ReasonValue, "output text totals more than %d bytes", MaxOutputBytes)
			}
		}
		*dst = out
		return nil
	}
}

// displayData decodes a MIME bundle: an object of known MIME types, each a string,
// text/plain present, the binary types standard base64.
func displayData(dst *map[string]string) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		m, err := members(v, ptr)
		if err != nil {
			return err
		}
		// Checked in sorted (code point) order, as the unknown names of an object are.
		slices.SortFunc(m, func(a, b member) int { return strings.Compare(a.name, b.name) })
		data := make(map[string]string, len(m))
		for _, x := range m {
			p := pointer(ptr, x.name)
			known, binary := DisplayMIME(x.name)
			if !known {
				return refuse(p, ReasonUnknown, "%q is not a known MIME type", x.name)
			}
			var s string
			if err := str(&s)(x.value, p); err != nil {
				return err
			}
			if binary {
				if _, err := base64.StdEncoding.Strict().DecodeString(s); err != nil {
					return refuse(p, ReasonValue, "not standard base64")
				}
			}
			data[x.name] = s
		}
		if _, ok := data[MIMEPlain]; !ok {
			return refuse(ptr, ReasonMissing, "no %q", MIMEPlain)
		}
		*dst = data
		return nil
	}
}

// exactOne accepts only the integer 1, the protocol version.
func exactOne(v jsontext.Value, ptr string) error {
	if !isInteger(v) {
		return refuse(ptr, ReasonType, "want an integer, got %s", v)
	}
	if string(v) != "1" {
		return refuse(ptr, ReasonMismatch, "version %s, want %d", v, Version)
	}
	return nil
}

// identity decodes an identifier that must equal want.
func identity(dst *string, want string) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		if err := ident(dst)(v, ptr); err != nil {
			return err
		}
		if *dst != want {
			return refuse(ptr, ReasonMismatch, "%q, want %q", *dst, want)
		}
		return nil
	}
}

func str(dst *string) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		if v.Kind() != '"' {
			return refuse(ptr, ReasonType, "want a string, got %s", kindName(v))
		}
		*dst = unquote(v)
		return nil
	}
}

// maxText is text with its limit bound, for nullable.
func maxText(max int) func(*string) func(jsontext.Value, string) error {
	return func(dst *string) func(jsontext.Value, string) error { return text(dst, max) }
}

// text decodes a string of at most max UTF-8 bytes; 0 means no limit of its own.
func text(dst *string, max int) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		if err := str(dst)(v, ptr); err != nil {
			return err
		}
		if max > 0 && len(*dst) > max {
			return refuse(ptr, ReasonValue, "%d bytes, more than %d", len(*dst), max)
		}
		return nil
	}
}

func ident(dst *string) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		if err := str(dst)(v, ptr); err != nil {
			return err
		}
		if !ValidIdentifier(*dst) {
			return refuse(ptr, ReasonValue, "%q is not 1..128 of [A-Za-z0-9_.-]", *dst)
		}
		return nil
	}
}

// nullable accepts null, leaving *dst nil, or what check accepts.
func nullable(dst **string, check func(*string) func(jsontext.Value, string) error) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		if v.Kind() == 'n' {
			*dst = nil
			return nil
		}
		return stringPtr(dst, check)(v, ptr)
	}
}

// stringPtr decodes what check accepts into a new string, and points *dst at it.
func stringPtr(dst **string, check func(*string) func(jsontext.Value, string) error) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		var s string
		if err := check(&s)(v, ptr); err != nil {
			return err
		}
		*dst = &s
		return nil
	}
}

func identList(dst *[]string) func(jsontext.Value, string) error {
	return stringList(dst, 0, ident)
}

// stringList decodes an array of at most max items (0: any number), each what check
// accepts.
func stringList(dst *[]string, max int, check func(*string) func(jsontext.Value, string) error) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		items, err := array(v, ptr)
		if err != nil {
			return err
		}
		if max > 0 && len(items) > max {
			return refuse(ptr, ReasonValue, "%d items, more than %d", len(items), max)
		}
		out := make([]string, len(items))
		for i, item := range items {
			if err := check(&out[i])(item, ptr+"/"+strconv.Itoa(i)); err != nil {
				return err
			}
		}
		*dst = out
		return nil
	}
}

// word decodes a string that must be one of words.
func word(dst *string, words ...string) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		if err := str(dst)(v, ptr); err != nil {
			return err
		}
		if !slices.Contains(words, *dst) {
			return refuse(ptr, ReasonValue, "%q is not one of %q", *dst, words)
		}
		return nil
	}
}

// count decodes a non-negative integer token that fits an int64.
func count(dst *int64) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		if !isInteger(v) {
			return refuse(ptr, ReasonType, "want an integer, got %s", v)
		}
		n, err := strconv.ParseInt(string(v), 10, 64)
		if err != nil || n < 0 {
			return refuse(ptr, ReasonValue, "%s is not in 0..%d", v, int64(1<<63-1))
		}
		*dst = n
		return nil
	}
}

func anyObject(dst *jsontext.Value) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		if v.Kind() != '{' {
			return refuse(ptr, ReasonType, "want an object, got %s", kindName(v))
		}
		*dst = bytes.Clone(v)
		return nil
	}
}

func anyValue(dst *jsontext.Value) func(jsontext.Value, string) error {
	return func(v jsontext.Value, ptr string) error {
		*dst = bytes.Clone(v)
		return nil
	}
}

// isInteger reports whether v is a JSON number written without fraction or exponent.
func isInteger(v jsontext.Value) bool {
	return v.Kind() == '0' && !bytes.ContainsAny(v, ".eE")
}

func kindName(v jsontext.Value) string {
	switch v.Kind() {
	case '{':
		return "an object"
	case '[':
		return "an array"
	case '"':
		return "a string"
	case '0':
		return "a number"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "nothing"
}

// pointerEscaper escapes a member name as a JSON pointer (RFC 6901) reference token.
var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// pointer appends name to ptr as a reference token.
func pointer(ptr, name string) string {
	return ptr + "/" + pointerEscaper.Replace(name)
}
