package journal

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/transcript"
)

// Transcript renders session's transcript from the record, as a model reads it: the
// instruction header it pinned, then in order each input framed "[<time> · <source>]",
// each cell, each cell's result framed "[<time> · ran <duration>]", and each
// observation that the instruction text changed. The frames are derived on every
// rendering; none is stored. The agent's model calls are among them where they were
// made, as messages of RoleModel (see WithModelCalls). It reads the record once, so
// the messages and the calls among them are of the same moment, however busy the host.
func (j *Journal) Transcript(ctx context.Context, session string) ([]kiln.Message, error) {
	log, err := j.sessionLog(ctx, session)
	if err != nil {
		return nil, err
	}
	t, err := transcript.FromLog(log)
	if err != nil {
		return nil, err
	}
	rendered := t.Render()
	messages := make([]kiln.Message, len(rendered))
	for i, m := range rendered {
		messages[i] = kiln.Message{Seq: m.Seq, Role: m.Role, Content: m.Content}
	}
	return withCalls(log, messages)
}

// WithModelCalls places session's model calls among messages rendered elsewhere (as a
// daemon's Transcript renders a session it holds): each before the first message
// recorded after it, the header excepted; the calls after the last message follow
// it. A call's Content says, on one line, its turn, purpose, route and model, stop
// reason, latency, the tokens as its route reported them (input, cached,
// cache-written, output; "-" where it said nothing) and its cost ("-" where a count or
// a price was absent).
func (j *Journal) WithModelCalls(ctx context.Context, session string, messages []kiln.Message) ([]kiln.Message, error) {
	log, err := j.sessionLog(ctx, session)
	if err != nil {
		return nil, err
	}
	return withCalls(log, messages)
}

// sessionLog is every journal entry of the session named name, read once.
func (j *Journal) sessionLog(ctx context.Context, name string) ([]store.Entry, error) {
	s, err := j.session(ctx, name)
	if err != nil {
		return nil, err
	}
	return j.st.Log(ctx, store.LogFilter{Session: s.ID})
}

// withCalls places the model calls of log, one session's entries, among messages.
func withCalls(log []store.Entry, messages []kiln.Message) ([]kiln.Message, error) {
	var calls []kiln.Message
	for _, e := range log {
		rec, ok := e.Record.(store.AgentRecord)
		if !ok || rec.Kind != store.KindModelCall {
			continue
		}
		var c ModelCall
		if err := json.Unmarshal(rec.Body, &c); err != nil {
			return nil, fmt.Errorf("kiln: model call record %d: %w", rec.ID, err)
		}
		calls = append(calls, kiln.Message{Seq: e.Seq, Role: kiln.RoleModel, Content: callLine(c), Call: rec.Body})
	}
	out := make([]kiln.Message, 0, len(messages)+len(calls))
	for i, m := range messages {
		for i > 0 && len(calls) > 0 && calls[0].Seq < m.Seq {
			out, calls = append(out, calls[0]), calls[1:]
		}
		out = append(out, m)
	}
	return append(out, calls...), nil
}

// callLine says what a model call was and used, on one line.
func callLine(c ModelCall) string {
	var totals Totals
	totals.Add(c)
	model := c.Route
	if c.Model != "" {
		model += "/" + c.Model
	}
	var b strings.Builder
	fmt.Fprintf(&b, "[model call %d of turn %d · %s · %s", c.Seq, c.Turn, c.Purpose, model)
	if c.Error != "" {
		fmt.Fprintf(&b, " · failed: %s", c.Error)
	}
	if c.StopReason != "" {
		fmt.Fprintf(&b, " · stop %s", c.StopReason)
	}
	fmt.Fprintf(&b, " · %s · in %s · cached %s · write %s · out %s · cost %s]", transcript.Ran(time.Duration(c.LatencyMs)*time.Millisecond),
		tokenText(totals.InputTokens), tokenText(totals.CachedTokens), tokenText(totals.CacheWrite), tokenText(totals.OutputTokens), totals.CostText())
	return b.String()
}
