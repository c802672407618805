package tools

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
)

// A tool's result is taken from a stdio server's line as the server wrote it, before
// the MCP SDK decodes the line: the SDK decodes numbers to float64s, rounding integers
// past 2^53, and refuses a message nested deeper than 1000, which ends the whole
// connection. The line of a tools/call response whose call awaits its raw result has
// its result taken out and replaced by an empty one, which the SDK decodes; the call
// then reads the result itself, as the program bindings and the host read fd-3 frames
// (internal/lossless), without a depth limit.

// rawSlot receives the raw result of one tools/call.
type rawSlot struct {
	id     string // the request's id as JSON, once written
	result []byte // the result as the server wrote it; nil if none was taken
}

// rawSlotKey is the context key of the slot a tools/call's result goes to.
type rawSlotKey struct{}

// rawResults are the slots of the tools/call requests written and not yet answered,
// by their ids as JSON.
type rawResults struct {
	mu    sync.Mutex
	slots map[string]*rawSlot
}

// expect registers the slot of ctx, if any, for the tools/call request msg.
func (r *rawResults) expect(ctx context.Context, msg jsonrpc.Message) {
	req, ok := msg.(*jsonrpc.Request)
	slot, _ := ctx.Value(rawSlotKey{}).(*rawSlot)
	if !ok || slot == nil || req.Method != "tools/call" || !req.ID.IsValid() {
		return
	}
	id, err := json.Marshal(req.ID.Raw())
	if err != nil {
		return
	}
	r.mu.Lock()
	if r.slots == nil {
		r.slots = map[string]*rawSlot{}
	}
	slot.id = string(id)
	r.slots[slot.id] = slot
	r.mu.Unlock()
}

// forget removes slot, answered or given up.
func (r *rawResults) forget(slot *rawSlot) {
	r.mu.Lock()
	if r.slots[slot.id] == slot {
		delete(r.slots, slot.id)
	}
	r.mu.Unlock()
}

// take returns line with the result taken out into its slot, if it is a response to a
// call that awaits its raw result, else line as it is.
func (r *rawResults) take(line []byte) []byte {
	id, result, ok := responseParts(line)
	if !ok {
		return line
	}
	r.mu.Lock()
	slot := r.slots[string(id)]
	if slot != nil {
		delete(r.slots, slot.id)
		slot.result = bytes.Clone(result)
	}
	r.mu.Unlock()
	if slot == nil {
		return line
	}
	out := append([]byte(`{"jsonrpc":"2.0","id":`), id...)
	return append(out, `,"result":{"content":[]}}`+"\n"...)
}

// tapReader passes a stdio server's lines through r.take. A line longer than
// MaxMessageBytes is passed on as it is, for the transport to refuse.
type tapReader struct {
	in      *bufio.Reader
	results *rawResults
	pending []byte
}

func newTapReader(in io.Reader, results *rawResults) *tapReader {
	return &tapReader{in: bufio.NewReaderSize(in, 64<<10), results: results}
}

func (t *tapReader) Read(p []byte) (int, error) {
	if len(t.pending) == 0 {
		line, err := t.readLine()
		if len(line) == 0 {
			return 0, err
		}
		t.pending = line
	}
	n := copy(p, t.pending)
	t.pending = t.pending[n:]
	return n, nil
}

// readLine reads one line, its newline kept, and takes a result out of it; past
// MaxMessageBytes it returns what it has read, untouched.
func (t *tapReader) readLine() ([]byte, error) {
	var line []byte
	for {
		chunk, err := t.in.ReadSlice('\n')
		line = append(line, chunk...)
		switch {
		case err == bufio.ErrBufferFull && len(line) <= MaxMessageBytes:
			continue
		case err == bufio.ErrBufferFull:
			return line, nil
		case err != nil:
			return line, err
		}
		return t.results.take(line), nil
	}
}

// responseParts returns the id and result of line, a JSON object, if it has both and
// no method or error: the raw text of each, found without decoding anything else.
func responseParts(line []byte) (id, result []byte, ok bool) {
	m, ok := members(line)
	if !ok || m[`"method"`] != nil || m[`"error"`] != nil || m[`"id"`] == nil || m[`"result"`] == nil {
		return nil, nil, false
	}
	return m[`"id"`], m[`"result"`], true
}

// members returns the raw text of each member of the JSON object data, by its key as
// written, quotes included; false if data is not an object as far as it skims it.
func members(data []byte) (map[string][]byte, bool) {
	s := scanner{data: data}
	s.space()
	if !s.consume('{') {
		return nil, false
	}
	m := map[string][]byte{}
	s.space()
	if s.consume('}') {
		return m, true
	}
	for {
		s.space()
		keyStart := s.i
		if !s.skipString() {
			return nil, false
		}
		key := string(data[keyStart:s.i])
		s.space()
		if !s.consume(':') {
			return nil, false
		}
		s.space()
		valueStart := s.i
		if !s.skipValue() || s.i == valueStart {
			return nil, false
		}
		m[key] = data[valueStart:s.i]
		s.space()
		if s.consume('}') {
			return m, true
		}
		if !s.consume(',') {
			return nil, false
		}
	}
}

// compact returns data without the white space outside its strings.
func compact(data []byte) []byte {
	out := make([]byte, 0, len(data))
	for i := 0; i < len(data); i++ {
		switch c := data[i]; c {
		case ' ', '\t', '\n', '\r':
		case '"':
			s := scanner{data: data, i: i}
			s.skipString()
			out = append(out, data[i:s.i]...)
			i = s.i - 1
		default:
			out = append(out, c)
		}
	}
	return out
}

// scanner skips over JSON text without decoding it, and without recursion.
type scanner struct {
	data []byte
	i    int
}

func (s *scanner) space() {
	for s.i < len(s.data) && (s.data[s.i] == ' ' || s.data[s.i] == '\t' || s.data[s.i] == '\n' || s.data[s.i] == '\r') {
		s.i++
	}
}

func (s *scanner) consume(c byte) bool {
	if s.i < len(s.data) && s.data[s.i] == c {
		s.i++
		return true
	}
	return false
}

// skipString skips a string, its quotes included.
func (s *scanner) skipString() bool {
	if !s.consume('"') {
		return false
	}
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case '\\':
			s.i += 2
		case '"':
			s.i++
			return true
		default:
			s.i++
		}
	}
	return false
}

// skipValue skips one value: strings whole, containers by counting their brackets.
// It checks nothing but that they balance; the value is checked when it is decoded.
func (s *scanner) skipValue() bool {
	depth := 0
	for s.i < len(s.data) {
		switch c := s.data[s.i]; c {
		case '"':
			if !s.skipString() {
				return false
			}
		case '{', '[':
			depth++
			s.i++
		case '}', ']':
			if depth == 0 {
				return true // the end of the enclosing object
			}
			depth--
			s.i++
		case ',':
			if depth == 0 {
				return true
			}
			s.i++
		case ' ', '\t', '\n', '\r':
			if depth == 0 {
				return true
			}
			s.i++
		default:
			s.i++
		}
		if depth == 0 && (s.i >= len(s.data) || s.data[s.i-1] == '}' || s.data[s.i-1] == ']' || s.data[s.i-1] == '"') {
			return true
		}
	}
	return depth == 0
}
