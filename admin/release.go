package admin

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/kilnrt/kiln"
	"github.com/kilnrt/kiln/internal/datadir"
	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/policy"
	"github.com/kilnrt/kiln/internal/release"
	"github.com/kilnrt/kiln/internal/store"
	kilnpy "github.com/kilnrt/kiln/python"
)

// InitialReleaseID is the identity of kiln's initial policy release: the one behavior
// epoch 0 names, before any activation.
const InitialReleaseID = store.InitialReleaseID

// ErrStaleEpoch is an activation whose expected behavior epoch is no longer the
// record's: it changed nothing.
var ErrStaleEpoch = store.ErrStaleEpoch

// Release is a release of an agent's behaviour policy: an immutable snapshot of a policy
// source tree, named by its identity (a SHA-256 over its files), stored under the data
// directory at releases/<identity>.
type Release struct {
	// ID is the release's identity, 64 lowercase hex characters.
	ID string `json:"id"`
	// Files counts the files of the snapshot.
	Files int `json:"files"`
	// Dir is where the release is stored.
	Dir string `json:"dir"`
}

// BuildRelease validates the policy source tree src against the snapshot rules (only
// .py, .json and .md files, at most 128 of them and 2 MiB in all, no symlinks;
// __pycache__ and .git are left out) and its manifest.json as activation checks it, and
// stores it under dataDir. A release already stored is checked, not rewritten.
func BuildRelease(dataDir, src string) (Release, error) {
	dataDir, err := datadir.OrDefault(dataDir)
	if err != nil {
		return Release{}, err
	}
	snap, err := release.Read(src)
	if err != nil {
		return Release{}, err
	}
	if _, err := release.ReadManifest(snap); err != nil {
		return Release{}, fmt.Errorf("release: build %s: %w", src, err)
	}
	dir, err := release.Store(dataDir, snap)
	if err != nil {
		return Release{}, err
	}
	return Release{ID: snap.ID, Files: len(snap.Files), Dir: dir}, nil
}

// StoredRelease is a release found under the data directory, and whether it checks.
type StoredRelease struct {
	Release
	// Refused says why the stored tree no longer checks (its identity or the snapshot
	// rules); "" when it does.
	Refused string `json:"refused,omitzero"`
}

// StoredReleases lists the releases stored under dataDir, sorted by identity, each
// checked as activation would check it. A data directory without releases has none.
func StoredReleases(dataDir string) ([]StoredRelease, error) {
	dataDir, err := datadir.OrDefault(dataDir)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(filepath.Join(dataDir, "releases"))
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("kiln: releases: %w", err)
	}
	var out []StoredRelease
	for _, e := range entries {
		if !e.IsDir() || !release.ValidID(e.Name()) {
			continue
		}
		r := StoredRelease{Release: Release{ID: e.Name(), Dir: release.Dir(dataDir, e.Name())}}
		if snap, err := release.Open(dataDir, e.Name()); err != nil {
			r.Refused = err.Error()
		} else {
			r.Files = len(snap.Files)
		}
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Behavior is the active policy as the durable record names it.
type Behavior struct {
	// Epoch counts activations: only an activation advances it, from 0.
	Epoch int64 `json:"epoch"`
	// ReleaseID is the identity of the release the epoch names: InitialReleaseID at
	// epoch 0.
	ReleaseID string `json:"release_id"`
	// ActivatedAt is when the epoch began; zero for the initial policy, which no
	// activation began.
	ActivatedAt time.Time `json:"activated_at,omitzero"`
}

// Initial says whether the behavior names kiln's initial release.
func (b Behavior) Initial() bool { return b.ReleaseID == InitialReleaseID }

// ReadBehavior reads the behavior epoch of dataDir's record, read-only. A data
// directory with no record yet is at epoch 0, kiln's initial release, as a new record
// would say, and stays without one.
func ReadBehavior(ctx context.Context, dataDir string) (Behavior, error) {
	dataDir, err := datadir.OrDefault(dataDir)
	if err != nil {
		return Behavior{}, err
	}
	if !datadir.HasRecord(dataDir) {
		return Behavior{ReleaseID: InitialReleaseID}, nil
	}
	st, err := datadir.OpenExisting(ctx, dataDir, true)
	if err != nil {
		return Behavior{}, err
	}
	defer st.Close()
	b, err := st.Behavior(ctx)
	return Behavior(b), err
}

// PolicyOptions say how to start a policy's hooks worker outside a workbench.
type PolicyOptions struct {
	// Python is the interpreter, a path or a name in PATH; default DefaultPython.
	Python string
	// Logger is told of the hooks worker's life; nil discards.
	Logger *slog.Logger
}

// ActivateRelease makes the stored release id the active policy of dataDir's record
// (made if need be), if the behavior epoch is still expected: it validates the release,
// starts its hooks worker through its handshake, and only then moves the epoch to
// expected+1, a compare-and-swap. A stale expectation changes nothing (ErrStaleEpoch);
// a release whose hooks do not import never becomes active. Running workbenches follow
// at their next cell or input.
func ActivateRelease(ctx context.Context, dataDir, id string, expected int64, opts PolicyOptions) (Behavior, error) {
	dataDir, err := datadir.OrDefault(dataDir)
	if err != nil {
		return Behavior{}, err
	}
	st, err := store.OpenDir(ctx, dataDir, store.Options{Logger: opts.Logger})
	if err != nil {
		return Behavior{}, err
	}
	defer st.Close()
	if opts.Python == "" {
		opts.Python = kiln.DefaultPython(os.Getenv)
	}
	python, err := interp.Find(ctx, opts.Python)
	if err != nil {
		return Behavior{}, err
	}
	m, err := policy.NewManager(ctx, st, dataDir, policy.Config{Python: python.Path, Package: kilnpy.Sources(),
		SessionID: "release", Logger: opts.Logger})
	if err != nil {
		return Behavior{}, err
	}
	defer m.Close()
	b, err := m.Activate(ctx, release.Dir(dataDir, id), expected)
	return Behavior(b), err
}
