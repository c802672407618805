package api

import (
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/live"
	"github.com/kilnrt/kiln/internal/serve"
)

// StreamWriteTimeout bounds one write to an event stream: a client that takes no bytes
// for this long is cut off, and its stream's goroutine ends.
const StreamWriteTimeout = 30 * time.Second

// MaxStreams bounds the event and output streams a daemon's API serves at once; one
// past it is answered 429.
const MaxStreams = 256

// MaxLongPolls bounds the requests a daemon's API holds at once waiting for a cell to
// end (a wait_ms above 0); one past it is answered 429 with a Retry-After.
const MaxLongPolls = 256

// RetryAfter is the Retry-After of a 429 for a stream or a long poll past its bound.
const RetryAfter = time.Second

// stream holds one of the MaxStreams places, or answers 429; release gives it back.
func (a *api) stream(w http.ResponseWriter) (release func(), ok bool) {
	return hold(w, a.streams, MaxStreams, "streams")
}

// longPoll holds one of the MaxLongPolls places, or answers 429; release gives it back.
func (a *api) longPoll(w http.ResponseWriter) (release func(), ok bool) {
	return hold(w, &a.longPolls, MaxLongPolls, "long polls")
}

// hold takes one of the most places that n counts, or answers 429 with a Retry-After.
func hold(w http.ResponseWriter, n *atomic.Int64, most int64, what string) (release func(), ok bool) {
	if n.Add(1) > most {
		n.Add(-1)
		w.Header().Set("Retry-After", strconv.Itoa(int(RetryAfter/time.Second)))
		writeProblem(w, problem(http.StatusTooManyRequests, CodeTooMany,
			fmt.Sprintf("the daemon serves %d %s, its most", most, what)))
		return nil, false
	}
	return func() { n.Add(-1) }, true
}

// Stream formats.
const (
	ndjsonType = "application/x-ndjson"
	sseType    = "text/event-stream"
)

func (a *api) sessionEvents(w http.ResponseWriter, r *http.Request) {
	s := a.session(w, r)
	if s == nil {
		return
	}
	a.events(w, r, s)
}

func (a *api) allEvents(w http.ResponseWriter, r *http.Request) { a.events(w, r, nil) }

// wantsSSE says the client asked for server-sent events.
func wantsSSE(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept"), ",") {
		if mt, _, err := mime.ParseMediaType(strings.TrimSpace(part)); err == nil && mt == sseType {
			return true
		}
	}
	return r.URL.Query().Get("format") == "sse"
}

// streamStart reads where a stream starts: Last-Event-ID when the client resumes, else
// ?after=; and whether it follows new events (?follow=0 ends it once caught up).
func streamStart(r *http.Request) (after int64, follow bool, p *Problem) {
	q := r.URL.Query()
	follow = true
	switch q.Get("follow") {
	case "", "1", "true":
	case "0", "false":
		follow = false
	default:
		return 0, false, problem(http.StatusBadRequest, CodeInvalid, fmt.Sprintf("follow %q is not 0 or 1", q.Get("follow")))
	}
	name, v := "after", q.Get("after")
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		name, v = "Last-Event-ID", id
	}
	if v == "" {
		return 0, follow, nil
	}
	after, err := strconv.ParseInt(v, 10, 64)
	if err != nil || after < 0 {
		return 0, false, problem(http.StatusBadRequest, CodeInvalid, fmt.Sprintf("%s %q is not a sequence number", name, v))
	}
	return after, follow, nil
}

// outputEnd is the last line of an output stream.
type outputEnd struct {
	Kind string `json:"kind"` // "end"
	// Live false: the cell had ended before the stream began, or its output could not all
	// be written as it came; what the stream lacks is in its record.
	Live         bool  `json:"live"`
	DroppedBytes int64 `json:"dropped_bytes"`
}

// output streams a running cell's output as NDJSON chunks from ?after= on — stdout and
// stderr text, and displays with their data — then one end line once the cell has ended.
func (a *api) output(w http.ResponseWriter, r *http.Request) {
	from := 0
	if v := r.URL.Query().Get("after"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < -1 {
			writeProblem(w, problem(http.StatusBadRequest, CodeInvalid, fmt.Sprintf("after %q is not a chunk index", v)))
			return
		}
		from = n + 1
	}
	_, x := a.execution(w, r)
	if x == nil {
		return
	}
	release, ok := a.stream(w)
	if !ok {
		return
	}
	defer release()
	out := newStreamWriter(w, ndjsonType)
	if !out.flush() {
		return
	}
	for {
		chunks, ended, dropped, err := x.Output(r.Context(), from)
		if err != nil {
			return
		}
		for _, c := range chunks {
			if !out.line(c) {
				return
			}
			from = c.Index + 1
		}
		if ended {
			out.line(outputEnd{Kind: "end", Live: x.Live(), DroppedBytes: dropped})
			out.flush()
			return
		}
		if !out.flush() {
			return
		}
	}
}

// streamWriter writes one stream's lines, each flush bounded by StreamWriteTimeout.
type streamWriter struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
	err error
}

// newStreamWriter starts a stream of media type mt.
func newStreamWriter(w http.ResponseWriter, mt string) *streamWriter {
	w.Header().Set("Content-Type", mt)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &streamWriter{w: w, rc: http.NewResponseController(w)}
}

// line adds v as one JSON line.
func (s *streamWriter) line(v any) bool {
	data, err := json.Marshal(v, json.Deterministic(true), jsontext.EscapeForHTML(false))
	if err != nil {
		s.err = err
		return false
	}
	s.buf = append(append(s.buf, data...), '\n')
	return true
}

// flush writes what is buffered; false once the client cannot take it.
func (s *streamWriter) flush() bool {
	if s.err != nil {
		return false
	}
	s.rc.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
	_, err := s.w.Write(s.buf)
	if err == nil {
		err = s.rc.Flush()
	}
	s.buf, s.err = s.buf[:0], err
	return err == nil
}

// events streams the journal entries of sess (nil for every session) after the client's
// start, one JSON object a line or one server-sent event each (a running cell's output
// among them, as the store records it), with heartbeats while idle.
func (a *api) events(w http.ResponseWriter, r *http.Request, sess *serve.Session) {
	after, follow, p := streamStart(r)
	if p != nil {
		writeProblem(w, p)
		return
	}
	var session int64 // every session's, for none
	if sess != nil {
		id, err := sess.RecordID(r.Context())
		if err != nil {
			writeProblem(w, problemOf(err))
			return
		}
		session = id
	}
	release, ok := a.stream(w)
	if !ok {
		return
	}
	defer release()
	sse := wantsSSE(r)
	mt := ndjsonType
	if sse {
		mt = sseType
	}
	out := newStreamWriter(w, mt)
	if !out.flush() { // the headers, at once: the client knows the stream is open
		return
	}
	ctx := r.Context()
	heartbeat := time.NewTimer(a.opts.Heartbeat)
	defer heartbeat.Stop()
	// A stream that follows with ?deltas=1 carries the model calls' pieces (model.delta)
	// as they come, between the records, with no id or seq: a resumed stream never
	// replays them. The stream of every session carries every session's, each named.
	var cursor live.Cursor
	var streamed <-chan struct{}
	pieces := live.AllSessions
	if session != 0 {
		pieces = session
	}
	if follow && r.URL.Query().Get("deltas") == "1" {
		cursor, streamed = a.d.Live().Follow(pieces)
	}
	for {
		changed := a.d.Store().Watch(session) // before the read: a commit of this session after it wakes the wait
		entries, err := a.d.Events(ctx, session, after, 0)
		if err != nil {
			return // the client left, or the daemon is stopping
		}
		// The pieces are read after the records and written before them: a piece comes
		// before every record committed after it, so a model call's pieces come before
		// its model_call record.
		if streamed != nil {
			var deltas []live.Delta
			deltas, cursor, streamed = a.d.Live().Read(pieces, cursor)
			for _, d := range deltas {
				data, _ := json.Marshal(d, json.Deterministic(true), jsontext.EscapeForHTML(false))
				if sse {
					out.buf = fmt.Appendf(out.buf, "event: model.delta\ndata: %s\n\n", data)
				} else {
					out.buf = append(append(out.buf, data...), '\n')
				}
			}
		}
		for _, e := range entries {
			data, err := json.Marshal(PublicEntry(e), json.Deterministic(true), jsontext.EscapeForHTML(false))
			if err != nil {
				a.log.Warn("encoding an event", "seq", e.Seq, "err", err)
				return
			}
			if sse {
				out.buf = fmt.Appendf(out.buf, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Kind, data)
			} else {
				out.buf = append(append(out.buf, data...), '\n')
			}
			after = e.Seq
		}
		if !follow {
			if !out.flush() || len(entries) == 0 { // a batch may end early at its bytes
				return
			}
			continue
		}
		if len(out.buf) > 0 {
			if !out.flush() {
				return
			}
			heartbeat.Reset(a.opts.Heartbeat)
		}
		select {
		case <-changed:
		case <-streamed: // nil, and never ready, on a stream without pieces
		case <-ctx.Done():
			return
		case <-heartbeat.C:
			if sse {
				out.buf = append(out.buf, ": heartbeat\n\n"...)
			} else {
				out.buf = append(out.buf, `{"kind":"heartbeat"}`+"\n"...)
			}
			if !out.flush() {
				return
			}
			heartbeat.Reset(a.opts.Heartbeat)
		}
	}
}
