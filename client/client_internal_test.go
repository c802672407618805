package client

import (
	"reflect"
	"testing"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/api"
)

// TestUnshownIsTheRecordPastWhatWasShown: a reader whose live output ended early is
// handed the rest of the record, nothing twice, its results aside.
func TestUnshownIsTheRecordPastWhatWasShown(t *testing.T) {
	display := kiln.Output{Stream: "display", Data: map[string]string{"text/plain": "H()"}}
	record := []kiln.Output{{Stream: "stdout", Text: "ab"}, display, {Stream: "stderr", Text: "e"}, {Stream: "result", Text: "1"}}
	for _, c := range []struct {
		shown, want []kiln.Output
	}{
		{nil, record[:3]},
		{[]kiln.Output{{Stream: "stdout", Text: "a"}}, []kiln.Output{{Stream: "stdout", Text: "b"}, display, record[2]}},
		{[]kiln.Output{record[0]}, record[1:3]},
		{record[:2], record[2:3]},
		{record[:3], nil},
		{[]kiln.Output{{Stream: "stderr", Text: "x"}}, record[:3]}, // not a prefix: the record whole
	} {
		if got := unshown(c.shown, record); !reflect.DeepEqual(got, c.want) && len(got)+len(c.want) > 0 {
			t.Errorf("shown %+v: got %+v; want %+v", c.shown, got, c.want)
		}
	}
}

// The problem codes a client tells apart are the codes the daemon's API answers with.
func TestProblemCodesAreTheAPIs(t *testing.T) {
	for got, want := range map[string]string{
		ProblemMalformedJSON: api.CodeMalformedJSON, ProblemUnknownField: api.CodeUnknownField,
		ProblemInvalid: api.CodeInvalid, ProblemProgramInvalid: api.CodeProgramInvalid,
		ProblemUnauthorized: api.CodeUnauthorized, ProblemFileRefused: api.CodeFileRefused,
		ProblemNotFound: api.CodeNotFound, ProblemNoSession: api.CodeNoSession,
		ProblemNoExecution: api.CodeNoExecution, ProblemNoDisplay: api.CodeNoDisplay,
		ProblemFileNotFound: api.CodeFileNotFound, ProblemMethodNotAllowed: api.CodeMethod,
		ProblemBusy: api.CodeBusy, ProblemSessionExists: api.CodeExists, ProblemSettingsDiffer: api.CodeSettingsDiffer,
		ProblemNotRunning: api.CodeNotRunning, ProblemNoAgent: api.CodeNoAgent, ProblemKeyReused: api.CodeKeyReused, ProblemSessionStopped: api.CodeStopped,
		ProblemTooLarge: api.CodeTooLarge, ProblemMediaType: api.CodeMediaType, ProblemTooMany: api.CodeTooMany,
		ProblemInternal: api.CodeInternal, ProblemUnavailable: api.CodeUnavailable,
	} {
		if got != want {
			t.Errorf("got %q; want %q", got, want)
		}
	}
}

func TestAttentionString(t *testing.T) {
	hundred, minute := 100, 60.0
	for _, c := range []struct {
		a    Attention
		want string
	}{
		{Attention{Action: AttentionWake, Priority: &hundred}, "wake, priority 100"},
		{Attention{Action: AttentionDefer, Seconds: &minute, Note: "the hook failed"}, "defer 60s (the hook failed)"},
		{Attention{Action: AttentionIgnore, Reason: "ambient chatter"}, "ignore: ambient chatter"},
		// What a daemon sends is not trusted to be whole.
		{Attention{Action: AttentionWake}, "wake"},
		{Attention{Action: "shout"}, "shout"},
	} {
		if got := c.a.String(); got != c.want {
			t.Errorf("got %q; want %q", got, c.want)
		}
	}
}
