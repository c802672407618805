package kiln

import (
	"context"
	"errors"
	"fmt"
	"os"

	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/policy"
	"github.com/kilnrt/kiln/internal/store"
	kilnpy "github.com/kilnrt/kiln/python"
)

// ErrInvalidInput is an input's text that is not 1..MaxSendText characters of UTF-8.
var ErrInvalidInput = errors.New("kiln: invalid input")

// ValidSendText checks text against the bound of an operator input and of the agent's
// own local.send: valid UTF-8, 1..MaxSendText characters. An error is ErrInvalidInput,
// saying which part of the rule the text breaks.
func ValidSendText(text string) error {
	if err := policy.ValidSendText(text); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidInput, err)
	}
	return nil
}

// Send records text as an input on the operator lane of session, in dataDir's durable
// record ("" for DefaultDataDir), with no daemon: what a waiting agent wakes on. The
// input is durable first; then the active policy decides its attention (in a hooks
// worker of DefaultPython), and the decision is recorded with it. An error once the input
// is recorded returns the Input with its ID and Ref.
//
// The record must exist (ErrNoRecord), and so must the session (ErrNoSession). While a
// daemon serves the directory, send through it (Daemon.Send): a session it holds is
// told of the input at once.
func Send(ctx context.Context, dataDir, session, text string) (Input, error) {
	if err := ValidSendText(text); err != nil {
		return Input{}, err
	}
	dataDir, err := dataDirOrDefault(dataDir)
	if err != nil {
		return Input{}, err
	}
	st, err := openExisting(ctx, dataDir, false)
	if err != nil {
		return Input{}, err
	}
	defer st.Close()
	sess, err := (&Journal{st: st}).session(ctx, session)
	if err != nil {
		return Input{}, err
	}
	ev, err := st.AppendEvent(ctx, sess.ID, store.SourceOperator, map[string]string{"text": text})
	if err != nil {
		return Input{}, err
	}
	in := Input{ID: ev.ID, Ref: InputRef(ev.ID)}
	python, err := interp.Find(ctx, DefaultPython(os.Getenv))
	if err != nil {
		return in, fmt.Errorf("kiln: deciding the attention of %s: %w", in.Ref, err)
	}
	m, err := policy.NewManager(ctx, st, dataDir, policy.Config{Python: python.Path, Package: kilnpy.Sources(), SessionID: session})
	if err != nil {
		return in, fmt.Errorf("kiln: deciding the attention of %s: %w", in.Ref, err)
	}
	defer m.Close()
	a, err := m.PlanEvent(ctx, ev)
	if err != nil {
		return in, fmt.Errorf("kiln: deciding the attention of %s: %w", in.Ref, err)
	}
	in.Attention = Attention{Action: AttentionAction(a.Action), Priority: a.Priority, Seconds: a.Seconds, Reason: a.Reason, Note: a.Note}
	return in, nil
}
