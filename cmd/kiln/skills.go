package main

import (
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/kilnrt/kiln/admin"
	"github.com/spf13/cobra"
)

// skillFlags name the two skill roots: --data for the managed one, --workspace for the
// builtin one's default.
type skillFlags struct {
	dataFlags
}

// roots are the skill roots the flags name, as a workbench of the same flags loads them.
func (f *skillFlags) roots() (admin.SkillRoots, error) {
	data, err := f.dataDir()
	if err != nil {
		return admin.SkillRoots{}, err
	}
	return admin.DefaultSkillRoots(data, f.workspace)
}

// scan reads the roots the flags name.
func (f *skillFlags) scan() (admin.SkillRoots, admin.SkillSet, error) {
	roots, err := f.roots()
	if err != nil {
		return roots, admin.SkillSet{}, err
	}
	set, err := admin.ScanSkills(roots)
	return roots, set, err
}

func (f *skillFlags) add(cmd *cobra.Command) {
	f.addData(cmd)
	cmd.Flags().StringVar(&f.workspace, "workspace", "", "the workspace whose skills directory is the builtin root, unless $KILN_SKILLS_DIR is set (default the current directory)")
}

func newSkills() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "skills",
		Short: "List, show and create the skills an agent can load",
		Long: `A skill is a directory holding SKILL.md whose first non-empty line is "# <id>", <id>
being the directory's name (1..128 of [A-Za-z0-9_.-]). Two roots form one namespace:
builtin skills from $KILN_SKILLS_DIR (default <workspace>/skills; it may be absent) and
managed skills from <data>/skills. Refused, each with its reason: an id defined in both
roots, a title that disagrees with its directory, a SKILL.md that is not UTF-8 or is
larger than 262144 bytes, a symlinked directory or SKILL.md.

Every workbench generation loads the valid set: a cell imports a skill as
kiln.skills.<id>, whose __doc__ is its body, and runtime.skills.index() and
runtime.skills.load(id) ask the host. A skill written during a session is loaded by the
next generation.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError{errors.New("name a subcommand: list, show or new")}
		},
	}
	cmd.AddCommand(newSkillsList(), newSkillsShow(), newSkillsNew())
	addJSON(cmd, nil, "print errors as JSON")
	return cmd
}

func newSkillsList() *cobra.Command {
	var flags skillFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list [--json]",
		Short: "List the valid skills and the refused ones, with why",
		Long: `List the valid skills of both roots and the refused ones, each with its reason, and
the set's revision (what a generation's hello echoes). With --json, one object:
{"revision", "skills": [{"id","root","path","digest"}], "refused": [{"id","root","path","reason"}]}.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			roots, set, err := flags.scan()
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), set)
			}
			writeSkillsText(cmd.OutOrStdout(), roots, set)
			return nil
		},
	}
	flags.add(cmd)
	addJSON(cmd, &asJSON, "print one JSON object")
	return cmd
}

func writeSkillsText(w io.Writer, roots admin.SkillRoots, set admin.SkillSet) {
	fmt.Fprintf(w, "builtin root: %s\nmanaged root: %s\n", roots.Builtin, roots.Managed)
	if len(set.Skills) == 0 {
		fmt.Fprintln(w, "no skills")
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, s := range set.Skills {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.ID, s.Root, s.Path)
	}
	tw.Flush()
	if len(set.Refused) > 0 {
		fmt.Fprintf(w, "refused:\n")
		for _, r := range set.Refused {
			fmt.Fprintf(w, "  %s (%s, %s): %s\n", r.ID, r.Root, r.Path, r.Reason)
		}
	}
	fmt.Fprintf(w, "revision %s\n", set.Revision)
}

func newSkillsShow() *cobra.Command {
	var flags skillFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID",
		Short: "Print one skill's body",
		Long:  `Print the body of skill ID; a refused skill prints why it was refused, and exits 1.`,
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			roots, set, err := flags.scan()
			if err != nil {
				return err
			}
			if sk, ok := set.Lookup(args[0]); ok {
				if asJSON {
					return printJSON(cmd.OutOrStdout(), map[string]string{"id": sk.ID, "root": sk.Root, "path": sk.Path, "digest": sk.Digest, "body": sk.Body})
				}
				_, err := io.WriteString(cmd.OutOrStdout(), sk.Body)
				return err
			}
			if r, ok := set.Refusal(args[0]); ok {
				return fmt.Errorf("skill %s (%s root, %s) is refused: %s", r.ID, r.Root, r.Path, r.Reason)
			}
			return codedError{codeNotFound, fmt.Errorf("no skill %q in %s or %s", args[0], roots.Builtin, roots.Managed)}
		},
	}
	flags.add(cmd)
	addJSON(cmd, &asJSON, `print one JSON object: {"id","root","path","digest","body"}`)
	return cmd
}

func newSkillsNew() *cobra.Command {
	var flags skillFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "new ID",
		Short: "Create a managed skill from a template",
		Long: `Create <data>/skills/ID/SKILL.md with a template body titled "# ID", and print its
path. Edit it; the next workbench generation loads it.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !admin.ValidIdentifier(args[0]) {
				return usageError{fmt.Errorf("skill id %q is not 1..128 of [A-Za-z0-9_.-]", args[0])}
			}
			roots, err := flags.roots()
			if err != nil {
				return err
			}
			path, err := admin.NewSkill(roots.Managed, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), map[string]string{"path": path})
			}
			fmt.Fprintln(cmd.OutOrStdout(), path)
			return nil
		},
	}
	flags.add(cmd)
	addJSON(cmd, &asJSON, `print one JSON object: {"path"}`)
	return cmd
}
