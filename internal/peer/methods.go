package peer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/go-json-experiment/json/jsontext"
	"github.com/kilnrt/kiln/internal/host"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
)

// open serves peer.open: the peer is recorded, with its origin, before its session
// opens; a session that does not open leaves the peer stopped, saying why.
func (s *Service) open(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		Mode     *string  `json:"mode"`
		Evidence []string `json:"evidence"`
	}
	if err := decodeOr(req, &p, func() bool { return p.Mode != nil }, `{"mode": "independent", "evidence": ["event:42", ...]}`); err != nil {
		return outcome(err)
	}
	if *p.Mode != ModeIndependent {
		return host.Reply(host.Error(host.CodeInvalidRequest, "mode %q is not one kiln opens: the supported modes are %q", *p.Mode, ModeIndependent))
	}
	if p.Evidence == nil {
		p.Evidence = []string{}
	}
	if err := checkRefs(ctx, s.store, req.Session.ID, p.Evidence); err != nil {
		return outcome(err)
	}
	var peer store.Peer
	err := req.Record(ctx, func(tx *store.Tx) error {
		depth := 1
		if parent, err := tx.PeerBySession(req.Session.ID); err == nil {
			depth = parent.Depth + 1
		} else if !errors.Is(err, store.ErrNotFound) {
			return err
		}
		if depth > MaxDepth {
			return refuse(CodeDepthLimit, "this session is a peer of depth %d, the deepest: it opens no peers", depth-1)
		}
		live, err := tx.CountLivePeers(req.Session.ID)
		if err != nil {
			return err
		}
		if live >= MaxPeers {
			return refuse(CodePeerLimit, "this session has %d peers open, the most it may: stop one (peer.stop) first", live)
		}
		n, err := tx.CountPeers(req.Session.ID)
		if err != nil {
			return err
		}
		origin := mustJSON(map[string]any{"evidence": p.Evidence, "execution": req.ExecutionID, "method": req.Method})
		for i := 1; ; i++ {
			peer = store.Peer{ParentID: req.Session.ID, Parent: req.Session.Name, Session: peerName(req.Session.Name, n+i),
				Mode: *p.Mode, Depth: depth, Origin: origin}
			err = tx.OpenPeer(&peer)
			if !errors.Is(err, store.ErrSessionExists) || i == 64 {
				break
			}
		}
		if err != nil {
			return err
		}
		_, err = tx.AppendPeerRecord(peer, store.KindPeerOpened, openedRecord{PeerID: peer.Session, Parent: peer.Parent,
			Mode: peer.Mode, Depth: depth, Evidence: p.Evidence})
		return err
	})
	if err != nil {
		return outcome(err)
	}
	if err := s.sessions.Open(ctx, peer.Parent, peer.Session); err != nil {
		reason := fmt.Sprintf("its session did not open: %v", err)
		if err := s.markStopped(context.WithoutCancel(ctx), peer, reason); err != nil {
			s.log.Error("recording a peer that did not open", "peer", peer.Session, "err", err)
		}
		return host.Reply(host.Error(CodePeerUnavailable, "peer %s: %s", peer.Session, reason))
	}
	return host.Reply(host.OK(Opened{PeerID: peer.Session, Session: peer.Session, Mode: peer.Mode, State: PeerOpen}))
}

// send serves peer.send: the request, the peer's input and the records commit
// together; then the peer is told.
func (s *Service) send(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		PeerID    *string  `json:"peer_id"`
		RequestID *string  `json:"request_id"`
		Content   *string  `json:"content"`
		Evidence  []string `json:"evidence"`
	}
	if err := decodeOr(req, &p, func() bool { return p.PeerID != nil && p.RequestID != nil && p.Content != nil },
		`{"peer_id": "...", "request_id": "req-1", "content": "...", "evidence": []}`); err != nil {
		return outcome(err)
	}
	if !wire.ValidIdentifier(*p.RequestID) {
		return host.Reply(host.Error(host.CodeInvalidRequest, "request_id %q is not 1..128 of [A-Za-z0-9_.-]", *p.RequestID))
	}
	if err := checkContent(*p.Content); err != nil {
		return outcome(err)
	}
	if p.Evidence == nil {
		p.Evidence = []string{}
	}
	if err := checkRefs(ctx, s.store, req.Session.ID, p.Evidence); err != nil {
		return outcome(err)
	}
	sum := digest(*p.PeerID, *p.Content, p.Evidence)
	var fx effects
	out := commit(func(tx *store.Tx, req *host.Request) (any, error) {
		fx = effects{}
		prev, err := tx.PeerRequestOf(req.Session.ID, *p.RequestID)
		switch {
		case err == nil && prev.Digest == sum:
			return Receipt{RequestID: prev.RequestID, PeerID: prev.PeerSession, State: stateOf(prev)}, nil
		case err == nil && (prev.State != StateInputRequired || prev.PeerSession != *p.PeerID):
			return nil, refuse(CodeConflict, "request %s was sent already, with other contents or to another peer", prev.RequestID)
		case err != nil && !errors.Is(err, store.ErrNotFound):
			return nil, err
		}
		peer, err := ownPeer(tx, req.Session.ID, *p.PeerID)
		if err != nil {
			return nil, err
		}
		if peer.State != PeerOpen && prev.ID == 0 {
			return nil, refuse(CodePeerStopped, "peer %s is %s: it takes no requests", peer.Session, peer.State)
		}
		if prev.ID != 0 { // the input the peer asked for: the request goes on
			if peer.State == PeerStopped {
				return nil, refuse(CodePeerStopped, "peer %s is stopped", peer.Session)
			}
			prev.Content, prev.Digest, prev.Evidence = *p.Content, sum, p.Evidence
			return request(tx, peer, prev, &fx)
		}
		open, err := tx.CountOpenPeerRequests(peer.ID)
		if err != nil {
			return nil, err
		}
		if open >= MaxOpenRequests {
			return nil, refuse(CodeOpenRequestLimit, "peer %s has %d requests open, the most it may: wait for one, or cancel one", peer.Session, open)
		}
		return request(tx, peer, store.PeerRequest{Peer: peer.ID, PeerSession: peer.Session, ParentID: req.Session.ID,
			RequestID: *p.RequestID, Content: *p.Content, Digest: sum, Evidence: p.Evidence}, &fx)
	})
	out.Committed = func(wire.Reply) { fx.run(s) }
	return out
}

// request puts r's content in peer's inbox and records r submitted: a new request (r.ID
// 0), or one in input_required given the input it asked for, which the peer reads as
// the request again.
func request(tx *store.Tx, peer store.Peer, r store.PeerRequest, fx *effects) (any, error) {
	ev, err := tx.AppendEvent(peer.SessionID, store.SourcePeer, requestInput{Text: r.Content,
		Request: requestIdentity{ID: r.RequestID, Session: peer.Parent}, Evidence: r.Evidence})
	if err != nil {
		return nil, err
	}
	r.State, r.InputEventID = StateSubmitted, ev.ID
	if r.ID == 0 {
		err = tx.InsertPeerRequest(&r)
	} else {
		r.Result, r.ResultEventID = nil, nil
		err = tx.SetPeerRequest(&r)
	}
	if err != nil {
		return nil, err
	}
	if _, err := tx.AppendPeerRecord(peer, store.KindPeerRequest, requestRecord{PeerID: peer.Session, Parent: peer.Parent,
		RequestID: r.RequestID, State: r.State, EventID: ev.ID, Evidence: r.Evidence}); err != nil {
		return nil, err
	}
	fx.to, fx.told = peer.Session, &ev
	return Receipt{RequestID: r.RequestID, PeerID: peer.Session, State: r.State}, nil
}

// result serves peer.result: the request's state, waiting up to wait_ms for a final one.
func (s *Service) result(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		RequestID *string `json:"request_id"`
		WaitMS    *int64  `json:"wait_ms"`
	}
	if err := decodeOr(req, &p, func() bool { return p.RequestID != nil }, `{"request_id": "req-1", "wait_ms": 0}`); err != nil {
		return outcome(err)
	}
	var wait int64
	if p.WaitMS != nil {
		wait = *p.WaitMS
	}
	if wait < 0 || wait > MaxWaitMS {
		return host.Reply(host.Error(host.CodeInvalidRequest, "wait_ms must be 0..%d, got %d", MaxWaitMS, wait))
	}
	deadline := time.Now().Add(time.Duration(wait) * time.Millisecond)
	for {
		changed := s.store.Watch(req.Session.ID) // before the read: a commit after it ends the wait
		r, err := s.store.PeerRequestOf(ctx, req.Session.ID, *p.RequestID)
		if errors.Is(err, store.ErrNotFound) {
			return host.Reply(host.Error(CodeNotFound, "this session sent no request %q", *p.RequestID))
		}
		if err != nil {
			return outcome(err)
		}
		if Final(r.State) || r.State == StateInputRequired || !waitFor(ctx, changed, deadline) {
			return host.Reply(host.OK(statusOf(r)))
		}
	}
}

// submitResult serves peer.submit_result, from a cell of the peer a request is
// addressed to.
func (s *Service) submitResult(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		RequestID *string        `json:"request_id"`
		Result    jsontext.Value `json:"result"`
		State     *string        `json:"state"`
	}
	if err := decodeOr(req, &p, func() bool { return p.RequestID != nil && p.Result != nil },
		`{"request_id": "req-1", "result": <a JSON value>, "state": "completed|failed|rejected"}`); err != nil {
		return outcome(err)
	}
	state := StateCompleted
	if p.State != nil {
		state = *p.State
	}
	if !slices.Contains([]string{StateCompleted, StateFailed, StateRejected, StateInputRequired}, state) {
		return host.Reply(host.Error(host.CodeInvalidRequest, "state %q is none of completed, failed, rejected, input_required", state))
	}
	result, err := checkResult(p.Result)
	if err != nil {
		return outcome(err)
	}
	var fx effects
	out := commit(func(tx *store.Tx, req *host.Request) (any, error) {
		fx = effects{}
		r, err := tx.PeerRequestTo(req.Session.ID, *p.RequestID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, refuse(CodeNotFound, "no request %q is addressed to this session", *p.RequestID)
		}
		if err != nil {
			return nil, err
		}
		switch {
		case r.State == StateCanceled:
			return nil, refuse(CodeCanceled, "request %s was canceled by its parent: %s", r.RequestID, r.Detail)
		case (Final(r.State) || r.State == StateInputRequired) && r.State == state && string(r.Result) == string(result):
			return statusOf(r), nil
		case Final(r.State):
			return nil, refuse(CodeConflict, "request %s is %s already, with another result", r.RequestID, r.State)
		case r.State == StateInputRequired:
			return nil, refuse(CodeConflict, "request %s asked its parent for input already: wait for it", r.RequestID)
		}
		peer, err := tx.PeerBySession(req.Session.ID)
		if err != nil {
			return nil, err
		}
		fx.to = peer.Parent
		if fx.told, err = finish(tx, peer, &r, state, result, "", false); err != nil {
			return nil, err
		}
		if fx.drained, err = s.drainedAfter(tx, peer); err != nil {
			return nil, err
		}
		return statusOf(r), nil
	})
	out.Committed = func(wire.Reply) { fx.run(s) }
	return out
}

// effects are what a committed reply leaves to do: tell session to of its input told,
// and stop a peer its last open request drained.
type effects struct {
	to      string
	told    *store.Event
	drained *store.Peer
}

func (fx effects) run(s *Service) {
	if fx.told != nil {
		s.deliver(fx.to, *fx.told)
	}
	if fx.drained != nil {
		peer := *fx.drained
		s.background(func(ctx context.Context) { s.stopWhenIdle(ctx, peer) })
	}
}

// drainedAfter is peer when it drains and has no open request left.
func (s *Service) drainedAfter(tx *store.Tx, peer store.Peer) (*store.Peer, error) {
	if peer.State != PeerDraining {
		return nil, nil
	}
	open, err := tx.CountOpenPeerRequests(peer.ID)
	if err != nil || open > 0 {
		return nil, err
	}
	return &peer, nil
}

// cancelRequest serves peer.cancel: the request is canceled — what the record says and
// the parent is told, not a claim that the peer stopped working — and the peer is told
// by an input.
func (s *Service) cancelRequest(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		RequestID *string `json:"request_id"`
	}
	if err := decodeOr(req, &p, func() bool { return p.RequestID != nil }, `{"request_id": "req-1"}`); err != nil {
		return outcome(err)
	}
	var fx effects
	out := commit(func(tx *store.Tx, req *host.Request) (any, error) {
		fx = effects{}
		r, err := tx.PeerRequestOf(req.Session.ID, *p.RequestID)
		if errors.Is(err, store.ErrNotFound) {
			return nil, refuse(CodeNotFound, "this session sent no request %q", *p.RequestID)
		}
		if err != nil {
			return nil, err
		}
		if Final(r.State) {
			st := statusOf(r)
			st.Note = "the request was " + r.State + " already: nothing was canceled"
			return st, nil
		}
		peer, err := tx.PeerBySession(mustSession(tx, r.PeerSession))
		if err != nil {
			return nil, err
		}
		taken := stateOf(r)
		if _, err := finish(tx, peer, &r, StateCanceled, nil, "canceled by "+req.Session.Name+" while "+taken, true); err != nil {
			return nil, err
		}
		ev, err := tx.AppendEvent(peer.SessionID, store.SourcePeer, cancelInput{
			Text:   fmt.Sprintf("%s canceled request %s: stop working on it; a result submitted for it now is refused", peer.Parent, r.RequestID),
			Cancel: requestIdentity{ID: r.RequestID, Session: peer.Parent}})
		if err != nil {
			return nil, err
		}
		fx.to, fx.told = peer.Session, &ev
		if fx.drained, err = s.drainedAfter(tx, peer); err != nil {
			return nil, err
		}
		st := statusOf(r)
		st.Note = "cancel requested while " + taken + ": the peer is told, and its result would be refused; a cell or turn of it may still run"
		return st, nil
	})
	out.Committed = func(wire.Reply) { fx.run(s) }
	return out
}

// mustSession is the store id of session name, 0 when the record has none (which no
// peer request names).
func mustSession(tx *store.Tx, name string) int64 {
	sess, err := tx.SessionByName(name)
	if err != nil {
		return 0
	}
	return sess.ID
}

// get serves peer.get.
func (s *Service) get(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		PeerID *string `json:"peer_id"`
	}
	if err := decodeOr(req, &p, func() bool { return p.PeerID != nil }, `{"peer_id": "..."}`); err != nil {
		return outcome(err)
	}
	peer, err := s.store.PeerByName(ctx, *p.PeerID)
	if errors.Is(err, store.ErrNotFound) || err == nil && peer.ParentID != req.Session.ID {
		return host.Reply(host.Error(CodeNotFound, "no peer %q of this session", *p.PeerID))
	}
	if err != nil {
		return outcome(err)
	}
	info, err := s.info(ctx, peer)
	if err != nil {
		return outcome(err)
	}
	return host.Reply(host.OK(info))
}

// list serves peer.list: the caller's peers, oldest first.
func (s *Service) list(ctx context.Context, req *host.Request) host.Outcome {
	if err := decodeOr(req, &struct{}{}, func() bool { return true }, `{}`); err != nil {
		return outcome(err)
	}
	infos, err := s.Peers(ctx, req.Session.ID)
	if err != nil {
		return outcome(err)
	}
	return host.Reply(host.OK(map[string]any{"peers": infos}))
}

// stop serves peer.stop. With drain, the peer takes no more requests and stops once its
// open ones end, or DrainTimeout after; without, its open requests are canceled and it
// stops now, its cell and turn interrupted.
func (s *Service) stop(ctx context.Context, req *host.Request) host.Outcome {
	var p struct {
		PeerID *string `json:"peer_id"`
		Drain  *bool   `json:"drain"`
	}
	if err := decodeOr(req, &p, func() bool { return p.PeerID != nil && p.Drain != nil }, `{"peer_id": "...", "drain": true}`); err != nil {
		return outcome(err)
	}
	var peer store.Peer
	var draining bool
	var open int
	err := req.Record(ctx, func(tx *store.Tx) error {
		var err error
		if peer, err = ownPeer(tx, req.Session.ID, *p.PeerID); err != nil {
			return err
		}
		if peer.State == PeerStopped {
			return nil
		}
		if open, err = tx.CountOpenPeerRequests(peer.ID); err != nil {
			return err
		}
		if *p.Drain && open > 0 {
			if peer.State == PeerDraining {
				draining = true
				return nil
			}
			deadline := tx.Now().Add(DrainTimeout)
			if err := tx.SetPeerState(peer.ID, PeerDraining, "", &deadline); err != nil {
				return err
			}
			peer.State, peer.DrainDeadline, draining = PeerDraining, &deadline, true
			_, err = tx.AppendPeerRecord(peer, store.KindPeerStopped, stoppedRecord{PeerID: peer.Session, Parent: peer.Parent,
				State: PeerDraining, Reason: fmt.Sprintf("drain asked by %s with %d requests open", req.Session.Name, open)})
			return err
		}
		return stopRecord(tx, peer, "stopped by "+req.Session.Name)
	})
	if err != nil {
		return outcome(err)
	}
	if draining {
		s.drainBy(peer)
		return host.Reply(host.OK(map[string]any{"peer_id": peer.Session, "state": PeerDraining, "open_requests": open}))
	}
	if peer.State != PeerStopped {
		if err := s.sessions.Stop(ctx, peer.Session, "stopped by "+req.Session.Name); err != nil {
			s.log.Warn("stopping a peer's session", "peer", peer.Session, "err", err)
		}
	}
	return host.Reply(host.OK(map[string]any{"peer_id": peer.Session, "state": PeerStopped, "canceled_requests": open}))
}

// stopRecord records peer stopped for reason, its open requests canceled, quietly: the
// parent stops it, or is told by the peer.stopped record.
func stopRecord(tx *store.Tx, peer store.Peer, reason string) error {
	reqs, err := tx.OpenPeerRequests(peer.ID)
	if err != nil {
		return err
	}
	for i := range reqs {
		if _, err := finish(tx, peer, &reqs[i], StateCanceled, nil, "the peer was stopped: "+reason, true); err != nil {
			return err
		}
	}
	if err := tx.SetPeerState(peer.ID, PeerStopped, reason, nil); err != nil {
		return err
	}
	_, err = tx.AppendPeerRecord(peer, store.KindPeerStopped, stoppedRecord{PeerID: peer.Session, Parent: peer.Parent,
		State: PeerStopped, Reason: reason})
	return err
}

// markStopped records peer stopped for reason, unless it is already.
func (s *Service) markStopped(ctx context.Context, peer store.Peer, reason string) error {
	return s.store.Update(ctx, func(tx *store.Tx) error {
		now, err := tx.PeerBySession(peer.SessionID)
		if err != nil || now.State == PeerStopped {
			return err
		}
		return stopRecord(tx, now, reason)
	})
}

// stopLater stops peer's session in the background: the request that drained it is
// answered first, from a cell of the peer itself perhaps.
func (s *Service) stopLater(peer store.Peer, reason string) {
	s.background(func(ctx context.Context) { s.stopPeer(ctx, peer, reason) })
}

// stopWhenIdle stops a drained peer once no cell or turn of it runs, as the record
// says — the cell that answered its last request ends first — or at its drain deadline.
func (s *Service) stopWhenIdle(ctx context.Context, peer store.Peer) {
	deadline := time.Now().Add(DrainTimeout)
	if peer.DrainDeadline != nil {
		deadline = *peer.DrainDeadline
	}
	for {
		changed := s.store.Watch(peer.SessionID) // before the read: a commit after it wakes the wait
		busy, err := s.store.Busy(ctx, peer.SessionID)
		if err != nil {
			s.log.Warn("reading whether a drained peer is busy", "peer", peer.Session, "err", err)
		}
		if err != nil || !busy || !waitFor(ctx, changed, deadline) {
			break
		}
	}
	if ctx.Err() == nil {
		s.stopPeer(ctx, peer, "drained: its open requests ended")
	}
}

// stopPeer records peer stopped and stops its session.
func (s *Service) stopPeer(ctx context.Context, peer store.Peer, reason string) {
	if err := s.markStopped(ctx, peer, reason); err != nil {
		s.log.Error("recording a peer stopped", "peer", peer.Session, "err", err)
		return
	}
	if err := s.sessions.Stop(ctx, peer.Session, reason); err != nil {
		s.log.Warn("stopping a peer's session", "peer", peer.Session, "err", err)
	}
}

// drainBy stops a draining peer at its drain deadline, if it has not stopped before.
func (s *Service) drainBy(peer store.Peer) {
	if peer.DrainDeadline == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.drains[peer.ID] != nil {
		return
	}
	s.drains[peer.ID] = time.AfterFunc(time.Until(*peer.DrainDeadline), func() {
		s.mu.Lock()
		delete(s.drains, peer.ID)
		s.mu.Unlock()
		s.stopLater(peer, fmt.Sprintf("its drain passed %s with requests open", DrainTimeout))
	})
}
