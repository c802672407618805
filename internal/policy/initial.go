package policy

import (
	"embed"
	"fmt"
	"io/fs"

	"github.com/kilnrt/kiln/internal/release"
)

// initialTree is kiln's initial policy as the release tree it is: a manifest and the
// module it names.
//
//go:embed initial
var initialTree embed.FS

// Initial is kiln's initial release: the policy epoch 0 names, before any activation.
// It is a release tree like any other, built into kiln, with its identity computed by
// release.New; testdata/behavior.json fixes that identity.
func Initial() release.Snapshot {
	var files []release.File
	err := fs.WalkDir(initialTree, "initial", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := initialTree.ReadFile(p)
		files = append(files, release.File{Name: p[len("initial/"):], Data: data})
		return err
	})
	if err != nil {
		panic(fmt.Sprintf("policy: the initial release: %v", err)) // the embedded tree is part of the binary
	}
	snap, err := release.New(files)
	if err != nil {
		panic(fmt.Sprintf("policy: the initial release: %v", err))
	}
	return snap
}
