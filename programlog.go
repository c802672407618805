package kiln

import (
	"context"
	"errors"
	"fmt"

	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/tools"
	"github.com/kilnrt/kiln/internal/wire"
)

// ProgramLog is a session of a data directory's durable record that program runs are
// recorded in: each run's source and how it ended, and each call it makes of a
// Toolset's tools, as a cell's host requests are. journal.Journal.Log and kiln log show them.
// Its methods are safe for concurrent use.
type ProgramLog struct {
	st      *store.Store
	session store.Session
}

// OpenProgramLog opens dataDir's durable record ("" for admin.DefaultDataDir), making it if
// it is absent, and the session named session in it, starting the session if the record
// has none. The name is an identifier: 1..128 of [A-Za-z0-9_.-]. The session's runs
// whose process died before they ended (kill -9, a crash) are recorded ended then:
// ProgramFailed, with why, their calls without a reply answered execution_ended.
func OpenProgramLog(ctx context.Context, dataDir, session string) (*ProgramLog, error) {
	if !wire.ValidIdentifier(session) {
		return nil, fmt.Errorf("kiln: session %q is not 1..128 of [A-Za-z0-9_.-]", session)
	}
	dataDir, err := dataDirOrDefault(dataDir)
	if err != nil {
		return nil, err
	}
	st, err := store.OpenDir(ctx, dataDir, store.Options{})
	if err != nil {
		return nil, err
	}
	s, _, err := st.EnsureSession(ctx, session)
	if err == nil {
		_, err = st.EndAbandonedPrograms(ctx, s.ID, tools.Unanswered)
	}
	if err != nil {
		st.Close()
		return nil, err
	}
	return &ProgramLog{st: st, session: s}, nil
}

// Close closes the record.
func (l *ProgramLog) Close() error { return l.st.Close() }

// Session is the name of the session the runs are recorded in.
func (l *ProgramLog) Session() string { return l.session.Name }

// ProgramNotRun is the status of a recorded run that never started: its Program was
// invalid (ErrInvalidProgram), or its Runner closed.
const ProgramNotRun RunStatus = "not-run"

// ProgramFailed is the status of a recorded run whose process died before it ended; the
// next OpenProgramLog of its session records it so.
const ProgramFailed RunStatus = store.StatusFailed

// Run runs p on r, as Runner.Run does, with the namespaces of tools (nil for none)
// added to p's, and records it in the session: the run as a program entry (p-1, p-2,
// … in the session) before it starts and its end once it has ended; each call of
// tools' tools as the host request tools.call of the run, committed before the tool
// runs, with its reply and the reply's time. A run records at most MaxProgramToolCalls
// calls; a call past them, or whose request is over 1 MiB of JSON, is refused
// (request_limit, invalid_request), not run and not recorded, and counted in the run's
// end. A result over the bound of a cell's reply is refused (reply_too_large) in the
// record and to the program alike. A call the run did not wait for, or whose run ended
// first (a wall-clock limit), is answered execution_ended in the record, whatever the tool
// returns, before the run's end; the end waits up to tools.EndWait (2 s) for such a tool,
// then answers its call so itself. Calls of p's own namespaces are not recorded.
func (l *ProgramLog) Run(ctx context.Context, r *Runner, p Program, ts *Toolset) (Result, error) {
	run, err := l.st.StartProgram(ctx, l.session.ID, p.Source)
	if err != nil {
		return Result{}, err
	}
	rec := tools.NewRecorder(l.st, l.session.ID, run.RunID)
	if ts != nil {
		p.Namespaces = append(p.Namespaces[:len(p.Namespaces):len(p.Namespaces)], namespacesFrom(ts.tb.Registry().RecordedBindings(rec))...)
	}
	res, runErr := r.Run(ctx, p)
	rec.End()
	status, errText := res.Status, res.Error
	if runErr != nil {
		status, errText = ProgramNotRun, runErr.Error()
	}
	endErr := l.st.EndProgram(context.WithoutCancel(ctx), run.ID,
		store.ProgramEnd{Status: string(status), Error: errText, Refused: rec.Refused(), Unanswered: rec.Unanswered()})
	return res, errors.Join(runErr, endErr)
}

// MaxProgramToolCalls is how many tool calls one recorded run may make: as many as a
// cell's host requests.
const MaxProgramToolCalls = tools.MaxRecordedCalls
