package peer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kilnrt/kiln/internal/agent"
	"github.com/kilnrt/kiln/internal/store"
)

// SessionStopped is told that session name stopped, for whatever reason: a peer not
// recorded stopped yet is, its open requests failed (each an input of its parent), and
// every live peer of the session is stopped, all at once.
func (s *Service) SessionStopped(ctx context.Context, name, reason string) {
	sess, err := s.store.SessionByName(ctx, name)
	if err != nil {
		return // a session that never opened has no peers and is no one's
	}
	var told []store.Event
	var parent string
	err = s.store.Update(ctx, func(tx *store.Tx) error {
		told = nil
		p, err := tx.PeerBySession(sess.ID)
		if errors.Is(err, store.ErrNotFound) || err == nil && p.State == PeerStopped {
			return nil
		}
		if err != nil {
			return err
		}
		parent = p.Parent
		reqs, err := tx.OpenPeerRequests(p.ID)
		if err != nil {
			return err
		}
		for i := range reqs {
			ev, err := finish(tx, p, &reqs[i], StateFailed, nil, "the peer stopped before it answered: "+reason, false)
			if err != nil {
				return err
			}
			told = append(told, *ev)
		}
		return stopRecord(tx, p, reason)
	})
	if err != nil {
		s.log.Error("recording a stopped peer", "session", name, "err", err)
	}
	for _, ev := range told {
		s.deliver(parent, ev)
	}
	peers, err := s.store.PeersOf(ctx, sess.ID)
	if err != nil {
		s.log.Error("reading a stopped session's peers", "session", name, "err", err)
		return
	}
	// Together: each stop may wait out its cell's interrupt grace, and its own peers'.
	var stops sync.WaitGroup
	for _, p := range peers {
		if p.State != PeerStopped {
			stops.Go(func() { s.stopPeer(ctx, p, "its parent "+name+" stopped") })
		}
	}
	stops.Wait()
}

// Recover takes up the record's live peers as a daemon starts: a peer whose session the
// daemon does not hold (its host died as it opened it) is recorded stopped, a drain
// past its deadline stops, and the others' deadlines are set again.
func (s *Service) Recover(ctx context.Context) error {
	peers, err := s.store.LivePeers(ctx)
	if err != nil {
		return err
	}
	for _, p := range peers {
		switch {
		case s.sessions.Activity(p.Session) == "":
			if err := s.markStopped(ctx, p, "the host ended before the peer's session opened"); err != nil {
				return err
			}
		case p.State == PeerDraining && p.DrainDeadline != nil && !p.DrainDeadline.After(time.Now()):
			s.stopLater(p, fmt.Sprintf("its drain passed %s with requests open", DrainTimeout))
		case p.State == PeerDraining:
			s.drainBy(p)
			peer := p
			s.background(func(ctx context.Context) {
				if _, open, err := s.store.PeerRequestSummary(ctx, peer.ID); err == nil && len(open) == 0 {
					s.stopWhenIdle(ctx, peer)
				}
			})
		}
	}
	return nil
}

// Info is a peer as peer.get and peer.list show it, and the daemon's surfaces.
type Info struct {
	PeerID       string     `json:"peer_id"`
	Session      string     `json:"session"`
	Parent       string     `json:"parent"`
	Mode         string     `json:"mode"`
	Depth        int        `json:"depth"`
	State        string     `json:"state"` // idle, working, waiting or stopped
	Draining     bool       `json:"draining,omitzero"`
	OpenedAt     time.Time  `json:"opened_at"`
	StoppedAt    *time.Time `json:"stopped_at,omitempty"`
	StopReason   string     `json:"stop_reason,omitempty"`
	OpenRequests []Status   `json:"open_requests"`
	Requests     int        `json:"requests"` // ever sent
	Turns        int        `json:"turns"`
	Usage        Usage      `json:"usage"`
	Peers        []Info     `json:"peers,omitempty"` // its own, in Tree
}

// Usage is what a peer's model calls used and cost so far.
type Usage struct {
	Calls        int    `json:"calls"`
	InputTokens  *int64 `json:"input_tokens,omitempty"`
	OutputTokens *int64 `json:"output_tokens,omitempty"`
	CostMicros   *int64 `json:"cost_micros,omitempty"`
}

// info describes peer now.
func (s *Service) info(ctx context.Context, peer store.Peer) (Info, error) {
	in := Info{PeerID: peer.Session, Session: peer.Session, Parent: peer.Parent, Mode: peer.Mode, Depth: peer.Depth,
		OpenedAt: peer.OpenedAt, StoppedAt: peer.StoppedAt, StopReason: peer.StopReason, OpenRequests: []Status{},
		Draining: peer.State == PeerDraining}
	in.State = ActivityStopped
	if peer.State != PeerStopped {
		in.State = s.sessions.Activity(peer.Session)
		if in.State == "" {
			in.State = ActivityIdle
		}
	}
	sent, open, err := s.store.PeerRequestSummary(ctx, peer.ID)
	if err != nil {
		return Info{}, err
	}
	in.Requests = sent
	for _, r := range open {
		in.OpenRequests = append(in.OpenRequests, statusOf(r))
	}
	turns, err := agent.Journal{Store: s.store, Session: peer.SessionID}.Turns(ctx)
	if err != nil {
		return Info{}, err
	}
	in.Turns = len(turns)
	var totals agent.Totals
	for _, t := range turns {
		for _, c := range t.Calls {
			totals.Add(c.Usage, c.CostMicros)
		}
	}
	in.Usage = Usage{Calls: totals.Calls, InputTokens: totals.InputTokens, OutputTokens: totals.OutputTokens, CostMicros: totals.CostMicros}
	return in, nil
}

// Peers describes the peers of session (its store id), oldest first.
func (s *Service) Peers(ctx context.Context, session int64) ([]Info, error) {
	peers, err := s.store.PeersOf(ctx, session)
	if err != nil {
		return nil, err
	}
	out := []Info{}
	for _, p := range peers {
		in, err := s.info(ctx, p)
		if err != nil {
			return nil, err
		}
		out = append(out, in)
	}
	return out, nil
}

// Tree describes the peers of session name, each with its own, to MaxDepth.
func (s *Service) Tree(ctx context.Context, name string) ([]Info, error) {
	sess, err := s.store.SessionByName(ctx, name)
	if errors.Is(err, store.ErrNotFound) {
		return []Info{}, nil
	}
	if err != nil {
		return nil, err
	}
	return s.tree(ctx, sess.ID, MaxDepth)
}

func (s *Service) tree(ctx context.Context, session int64, depth int) ([]Info, error) {
	infos, err := s.Peers(ctx, session)
	if err != nil || depth <= 1 {
		return infos, err
	}
	peers, err := s.store.PeersOf(ctx, session)
	if err != nil {
		return nil, err
	}
	for i, p := range peers {
		if infos[i].Peers, err = s.tree(ctx, p.SessionID, depth-1); err != nil {
			return nil, err
		}
	}
	return infos, nil
}

// Charged is what the model calls of session's peers, and theirs, cost so far
// (micro-dollars): what counts toward the session's own cost cap. A record that cannot
// be read counts nothing, and is logged.
func (s *Service) Charged(ctx context.Context, session int64) int64 {
	var total int64
	frontier := []int64{session}
	for depth := 0; depth < MaxDepth && len(frontier) > 0; depth++ {
		var next []int64
		for _, id := range frontier {
			peers, err := s.store.PeersOf(ctx, id)
			if err != nil {
				s.log.Warn("reading a session's peers for its cost", "session", id, "err", err)
				continue
			}
			for _, p := range peers {
				spent, _, err := agent.Journal{Store: s.store, Session: p.SessionID}.Spent(ctx, time.Now())
				if err != nil {
					s.log.Warn("reading a peer's cost", "peer", p.Session, "err", err)
				}
				total += spent
				next = append(next, p.SessionID)
			}
		}
		frontier = next
	}
	return total
}
