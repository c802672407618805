package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"

	"github.com/kilnrt/kiln/internal/policy"
	"github.com/kilnrt/kiln/internal/release"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/spf13/cobra"
)

func newRelease() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "release",
		Short: "Build, activate and list releases of an agent's policy source",
		Long: `A release is an immutable snapshot of a policy source directory, named by its identity:
SHA-256 over its files sorted by POSIX relative name, feeding for each the u64
big-endian length of the name, the name, the u64 big-endian length of the content, and
the content. A snapshot holds only .py, .json and .md files, at most 128 of them and
2 MiB in all, and no symlinks (__pycache__ and .git are left out). Releases live in
<data>/releases/<identity>.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError{fmt.Errorf("name a subcommand: build or status")}
		},
	}
	cmd.AddCommand(newReleaseBuild(), newReleaseActivate(), newReleaseStatus())
	return cmd
}

func newReleaseBuild() *cobra.Command {
	var flags dataFlags
	cmd := &cobra.Command{
		Use:   "build DIR",
		Short: "Validate a policy source directory, store it as a release, print its identity",
		Long: `Validate the source tree DIR against the snapshot rules, store it in
<data>/releases/<identity> (a release already stored is checked, not rewritten), and
print the identity. A tree that breaks a rule is refused with the path and the rule;
so is one whose manifest.json activation would refuse (version 1 and exactly one
entrypoint for each of attention.plan and delivery.review), with the same message.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			data, err := flags.dataDir()
			if err != nil {
				return err
			}
			snap, err := release.Read(args[0])
			if err != nil {
				return err
			}
			if _, err := release.ReadManifest(snap); err != nil {
				return fmt.Errorf("release: build %s: %w", args[0], err)
			}
			dir, err := release.Store(data, snap)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", snap.ID)
			fmt.Fprintf(cmd.ErrOrStderr(), "kiln: %d files stored in %s\n", len(snap.Files), dir)
			return nil
		},
	}
	flags.addData(cmd)
	return cmd
}

func newReleaseStatus() *cobra.Command {
	var flags dataFlags
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the behavior epoch and the active release, and list the stored releases",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := flags.dataDir()
			if err != nil {
				return err
			}
			b, err := behaviorOf(cmd.Context(), &flags, data)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "epoch %d, active release %s\n", b.Epoch, releaseName(b))
			entries, err := os.ReadDir(filepath.Join(data, "releases"))
			if os.IsNotExist(err) {
				fmt.Fprintln(cmd.OutOrStdout(), "no releases")
				return nil
			}
			if err != nil {
				return err
			}
			var ids []string
			for _, e := range entries {
				if e.IsDir() && release.ValidID(e.Name()) {
					ids = append(ids, e.Name())
				}
			}
			sort.Strings(ids)
			if len(ids) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no releases")
			}
			bad := 0
			for _, id := range ids {
				snap, err := release.Open(data, id)
				if err != nil {
					bad++
					fmt.Fprintf(cmd.OutOrStdout(), "%s  refused: %v\n", id, err)
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s  %d files\n", id, len(snap.Files))
			}
			if bad > 0 {
				return fmt.Errorf("%d of %d stored releases do not check", bad, len(ids))
			}
			return nil
		},
	}
	flags.addData(cmd)
	return cmd
}

// behaviorOf reads the behavior epoch of the record in data, read-only; a data directory
// with no record yet is at epoch 0, the initial release, as a new record would say, and
// stays without one.
func behaviorOf(ctx context.Context, flags *dataFlags, data string) (store.Behavior, error) {
	if _, err := os.Stat(filepath.Join(data, store.FileName)); errors.Is(err, fs.ErrNotExist) {
		return store.Behavior{Epoch: 0, ReleaseID: policy.Initial().ID}, nil
	}
	st, err := flags.openExisting(ctx, true)
	if err != nil {
		return store.Behavior{}, err
	}
	defer st.Close()
	return st.Behavior(ctx)
}
