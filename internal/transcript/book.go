package transcript

import (
	"context"
	"fmt"
	"strings"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/store"
)

// Entry is one record of a session's transcript, in sequence: a header link, an input, a
// cell, or a cell's result.
type Entry struct {
	Seq    int64
	Link   *Link
	Input  *Input
	Cell   *store.Execution // a cell the agent wrote
	Result *store.Execution // the same cell, ended
}

// Transcript is a session's transcript records, in sequence.
type Transcript struct {
	Entries []Entry
}

// Load reads session's transcript from st: its header records, inputs, cells and their
// results, in journal order.
func Load(ctx context.Context, st *store.Store, session int64) (Transcript, error) {
	log, err := st.Log(ctx, store.LogFilter{Session: session})
	if err != nil {
		return Transcript{}, err
	}
	return FromLog(log)
}

// FromLog is the transcript of one session's journal entries, read by the caller (as
// Store.Log returns them, in order): for a reader that needs other records of the same
// reading.
func FromLog(log []store.Entry) (Transcript, error) {
	var t Transcript
	for _, e := range log {
		entry := Entry{Seq: e.Seq}
		switch rec := e.Record.(type) {
		case store.PromptRecord:
			link, err := linkOf(e.Seq, rec)
			if err != nil {
				return Transcript{}, err
			}
			entry.Link = &link
		case store.Event:
			if rec.Source == store.SourceAgent {
				continue // the agent's own speech: its cell and result already hold it
			}
			entry.Input = &Input{Source: rec.Source, ReceivedAt: rec.ReceivedAt, Payload: rec.Payload}
		case store.Execution:
			if e.Kind == store.KindExecution {
				entry.Cell = &rec
			} else {
				entry.Result = &rec
			}
		default:
			continue
		}
		t.Entries = append(t.Entries, entry)
	}
	return t, nil
}

// linkOf decodes a header record.
func linkOf(seq int64, rec store.PromptRecord) (Link, error) {
	link := Link{Seq: seq}
	var err error
	switch rec.Type {
	case TypePin:
		link.Pin = new(Pin)
		err = json.Unmarshal(rec.Body, link.Pin)
	case TypeRevision:
		link.Revision = new(Revision)
		err = json.Unmarshal(rec.Body, link.Revision)
	default:
		err = fmt.Errorf("unknown type %q", rec.Type)
	}
	if err != nil {
		return Link{}, fmt.Errorf("transcript: header record %d: %w", rec.ID, err)
	}
	return link, nil
}

// Links are the transcript's header records, in sequence.
func (t Transcript) Links() []Link {
	var out []Link
	for _, e := range t.Entries {
		if e.Link != nil {
			out = append(out, *e.Link)
		}
	}
	return out
}

// Render is what a model reads of the transcript: the text of its newest pin, then the
// records that pin leaves visible, each framed as its kind is.
//
// A pin leaves visible every record after it and, for a fold's pin (Pin.FrontierSeq
// set, see Fold), the inputs, cells and results from its frontier on that were recorded
// before it; a fold therefore hides only what it covers. Header records before the pin
// are not rendered: the pin's text already holds them. A revision that does not
// reconstruct its text (see Resolve) is rendered as such, never as what it claims.
func (t Transcript) Render() []Message {
	pin := -1
	for i, e := range t.Entries {
		if e.Link != nil && e.Link.Pin != nil {
			pin = i
		}
	}
	var out []Message
	from := int64(0)
	if pin >= 0 {
		p := t.Entries[pin]
		out = []Message{{Seq: p.Seq, Role: RoleSystem, Content: p.Link.Pin.Text}}
		from = p.Seq
		if f := p.Link.Pin.FrontierSeq; f > 0 && f < from {
			from = f
		}
	}
	broken := Resolve(t.Links()).Broken
	for i, e := range t.Entries {
		if e.Seq < from || i == pin || e.Link != nil && i < pin {
			continue
		}
		switch {
		case e.Link != nil && e.Link.Revision != nil:
			content := RenderObservation(*e.Link.Revision)
			if problem, ok := broken[e.Seq]; ok {
				content = RenderBrokenObservation(*e.Link.Revision, problem)
			}
			out = append(out, Message{Seq: e.Seq, Role: RoleUser, Content: content})
		case e.Input != nil:
			out = append(out, Message{Seq: e.Seq, Role: RoleUser, Content: RenderInput(*e.Input)})
		case e.Cell != nil:
			out = append(out, Message{Seq: e.Seq, Role: RoleAssistant, Content: e.Cell.Code})
		case e.Result != nil:
			out = append(out, Message{Seq: e.Seq, Role: RoleTool, Content: RenderToolResult(resultOf(*e.Result))})
		}
	}
	return out
}

// resultOf is the tool result an ended execution gives.
func resultOf(x store.Execution) ToolResult {
	r := ToolResult{Status: x.Status}
	if x.EndedAt != nil {
		r.At = *x.EndedAt
		if !x.NotRun {
			ran := x.EndedAt.Sub(x.StartedAt)
			r.Ran = &ran
		}
	}
	var output []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(x.Output, &output) == nil {
		var b strings.Builder
		for _, o := range output {
			b.WriteString(o.Text)
			if !strings.HasSuffix(o.Text, "\n") {
				b.WriteString("\n")
			}
		}
		r.Output = b.String()
	}
	if x.TruncatedBytes > 0 {
		r.Output += fmt.Sprintf("[%d more bytes of output were not kept]\n", x.TruncatedBytes)
	}
	if x.Error != nil {
		r.Error = *x.Error
	}
	return r
}
