package api

import (
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
)

// StreamWriteTimeout bounds one write to an event stream: a client that takes no bytes
// for this long is cut off, and its stream's goroutine ends.
const StreamWriteTimeout = 30 * time.Second

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
	a.events(w, r, s.StoreID())
}

func (a *api) allEvents(w http.ResponseWriter, r *http.Request) { a.events(w, r, 0) }

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

// events streams the journal entries of session (0 for all) after the client's start,
// one JSON object a line or one server-sent event each, with heartbeats while idle.
func (a *api) events(w http.ResponseWriter, r *http.Request, session int64) {
	after, follow, p := streamStart(r)
	if p != nil {
		writeProblem(w, p)
		return
	}
	sse := wantsSSE(r)
	rc := http.NewResponseController(w)
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no")
	if sse {
		w.Header().Set("Content-Type", sseType)
	} else {
		w.Header().Set("Content-Type", ndjsonType)
	}
	w.WriteHeader(http.StatusOK)
	var buf []byte
	flush := func() bool {
		rc.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
		_, err := w.Write(buf)
		if err == nil {
			err = rc.Flush()
		}
		buf = buf[:0]
		return err == nil
	}
	if !flush() { // the headers, at once: the client knows the stream is open
		return
	}
	ctx := r.Context()
	for {
		wait := a.opts.Heartbeat
		if !follow {
			wait = 0
		}
		entries, err := a.d.Events(ctx, session, after, wait)
		if err != nil {
			return // the client left, or the daemon is stopping
		}
		if len(entries) == 0 {
			if !follow {
				return
			}
			if sse {
				buf = append(buf, ": heartbeat\n\n"...)
			} else {
				buf = append(buf, `{"kind":"heartbeat"}`+"\n"...)
			}
			if !flush() {
				return
			}
			continue
		}
		for _, e := range entries {
			data, err := json.Marshal(e, json.Deterministic(true), jsontext.EscapeForHTML(false))
			if err != nil {
				a.log.Warn("encoding an event", "seq", e.Seq, "err", err)
				return
			}
			if sse {
				buf = fmt.Appendf(buf, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Kind, data)
			} else {
				buf = append(append(buf, data...), '\n')
			}
			after = e.Seq
		}
		if !flush() {
			return
		}
	}
}
