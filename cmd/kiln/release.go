package main

import (
	"fmt"

	"github.com/kilnrt/kiln/admin"
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
	addJSON(cmd, nil, "print errors as JSON")
	return cmd
}

func newReleaseBuild() *cobra.Command {
	var flags dataFlags
	var asJSON bool
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
			r, err := admin.BuildRelease(data, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), r)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s\n", r.ID)
			fmt.Fprintf(cmd.ErrOrStderr(), "kiln: %d files stored in %s\n", r.Files, r.Dir)
			return nil
		},
	}
	flags.addData(cmd)
	addJSON(cmd, &asJSON, `print one JSON object: {"id","files","dir"}`)
	return cmd
}

func newReleaseStatus() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show the behavior epoch and the active release, and list the stored releases",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			data, err := flags.dataDir()
			if err != nil {
				return err
			}
			b, err := admin.ReadBehavior(cmd.Context(), data)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			stored, err := admin.StoredReleases(data)
			if err != nil {
				return err
			}
			if asJSON {
				if stored == nil {
					stored = []admin.StoredRelease{}
				}
				if err := printJSON(out, map[string]any{"behavior": b, "releases": stored}); err != nil {
					return err
				}
				return refusedReleases(stored)
			}
			fmt.Fprintf(out, "epoch %d, active release %s\n", b.Epoch, releaseName(b))
			if len(stored) == 0 {
				fmt.Fprintln(out, "no releases")
			}
			for _, r := range stored {
				if r.Refused != "" {
					fmt.Fprintf(out, "%s  refused: %s\n", r.ID, r.Refused)
					continue
				}
				fmt.Fprintf(out, "%s  %d files\n", r.ID, r.Files)
			}
			return refusedReleases(stored)
		},
	}
	flags.addData(cmd)
	addJSON(cmd, &asJSON, `print one JSON object: {"behavior","releases":[{"id","files","dir","refused"}]}`)
	return cmd
}

// refusedReleases says how many of stored do not check; nil when all do.
func refusedReleases(stored []admin.StoredRelease) error {
	bad := 0
	for _, r := range stored {
		if r.Refused != "" {
			bad++
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d stored releases do not check", bad, len(stored))
	}
	return nil
}
