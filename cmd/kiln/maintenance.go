package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/kilnrt/kiln/journal"
	"github.com/spf13/cobra"
)

func newMaintenance() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "maintenance",
		Short: "Show the work items agents keep about themselves",
		Long: `An agent that improves itself opens durable work items (maintenance.originate) with a
purpose, a reason and evidence refs, and later assesses each (maintenance.assess) with
an outcome: no-change, changed, deferred or abandoned. The assessment records what the
assessing session changed in between: release activations, orientation adoptions and
skills written. Items belong to the data directory: every session sees them.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError{errors.New("name a subcommand: list or show")}
		},
	}
	cmd.AddCommand(newMaintenanceList(), newMaintenanceShow())
	addJSON(cmd, nil, "print errors as JSON")
	return cmd
}

func newMaintenanceList() *cobra.Command {
	var flags dataFlags
	var asJSON, open bool
	cmd := &cobra.Command{
		Use:   "list [--open] [--json]",
		Short: "List the work items, oldest first",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return listed(cmd, &flags, asJSON, func(ctx context.Context, j *journal.Journal) ([]journal.WorkItem, error) {
				return j.WorkItems(ctx, open)
			}, printWorkItems)
		},
	}
	flags.addData(cmd)
	cmd.Flags().BoolVar(&open, "open", false, "only the open items")
	addJSON(cmd, &asJSON, "print one JSON object per item")
	return cmd
}

func newMaintenanceShow() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ITEM [--json]",
		Short: "Show one work item whole: evidence, origin, assessment and the changes it links",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return listed(cmd, &flags, asJSON, func(ctx context.Context, j *journal.Journal) ([]journal.WorkItem, error) {
				it, err := j.WorkItem(ctx, args[0])
				return []journal.WorkItem{it}, err
			}, func(w io.Writer, items []journal.WorkItem) error {
				printWorkItem(w, items[0])
				return nil
			})
		},
	}
	flags.addData(cmd)
	addJSON(cmd, &asJSON, "print the item as one JSON object")
	return cmd
}

// printWorkItems writes one line an item.
func printWorkItems(w io.Writer, items []journal.WorkItem) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ITEM\tSTATE\tOUTCOME\tORIGIN\tPURPOSE")
	for _, it := range items {
		outcome := "-"
		if it.Assessment != nil {
			outcome = it.Assessment.Outcome
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s/%s\t%s\n", it.WorkItemID, it.State, outcome, it.Origin.Session,
			it.Origin.ExecutionID, firstLine(it.Purpose, 60))
	}
	return tw.Flush()
}

// printWorkItem says what a work item is, and what came of it.
func printWorkItem(w io.Writer, it journal.WorkItem) {
	fmt.Fprintf(w, "%s  %s\n", it.WorkItemID, it.State)
	fmt.Fprintf(w, "opened    %s by session %s, execution %s (request:%d)\n", stamp(it.OriginatedAt),
		it.Origin.Session, it.Origin.ExecutionID, it.Origin.RequestID)
	fmt.Fprintf(w, "purpose   %s\n", it.Purpose)
	fmt.Fprintf(w, "reason    %s\n", it.Reason)
	fmt.Fprintf(w, "evidence  %s\n", orNone(strings.Join(it.EvidenceRefs, ", ")))
	a := it.Assessment
	if a == nil {
		return
	}
	fmt.Fprintf(w, "assessed  %s %s by session %s, execution %s (request:%d)\n", stamp(a.AssessedAt), a.Outcome,
		a.By.Session, a.By.ExecutionID, a.By.RequestID)
	for _, c := range a.Changes.Activations {
		fmt.Fprintf(w, "  release activation   %s %s\n", c.Ref, c.Request)
	}
	for _, c := range a.Changes.Adoptions {
		fmt.Fprintf(w, "  orientation adoption %s %s\n", c.Ref, c.Request)
	}
	for _, s := range a.Changes.Skills {
		fmt.Fprintf(w, "  skill %-14s %s\n", s.Change, s.ID)
	}
	if len(a.Changes.Activations)+len(a.Changes.Adoptions)+len(a.Changes.Skills) == 0 {
		fmt.Fprintln(w, "  no changes recorded")
	}
}

func newOrientation() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "orientation",
		Short: "Show the orientation texts agents adopted",
		Long: `An agent stages orientation texts (orientation.stage) and adopts them
(orientation.adopt) into the orientation source of its instruction text, for every
session of the data directory (scope global) or for its own (scope session). A session
runs under its own scope's adoption, else the global one.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError{errors.New("name a subcommand: show or history")}
		},
	}
	cmd.AddCommand(newOrientationShow(), newOrientationHistory())
	addJSON(cmd, nil, "print errors as JSON")
	return cmd
}

func newOrientationShow() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show [--json]",
		Short: "Show the current adoption of each scope, and its text",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return listed(cmd, &flags, asJSON, func(ctx context.Context, j *journal.Journal) ([]journal.Adoption, error) {
				all, err := j.Adoptions(ctx)
				return currentAdoptions(all), err
			}, printCurrentAdoptions)
		},
	}
	flags.addData(cmd)
	addJSON(cmd, &asJSON, "print one JSON object per scope's current adoption")
	return cmd
}

func newOrientationHistory() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "history [--json]",
		Short: "List every adoption, oldest first: who adopted what, and what it replaced",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return listed(cmd, &flags, asJSON, func(ctx context.Context, j *journal.Journal) ([]journal.Adoption, error) {
				return j.Adoptions(ctx)
			}, printAdoptions)
		},
	}
	flags.addData(cmd)
	addJSON(cmd, &asJSON, "print one JSON object per adoption")
	return cmd
}

// printJSONLines prints each of items as one JSON object a line.
func printJSONLines[T any](w io.Writer, items []T) error {
	for _, it := range items {
		if err := printJSON(w, it); err != nil {
			return err
		}
	}
	return nil
}

// printCurrentAdoptions writes each scope's current adoption and its text.
func printCurrentAdoptions(w io.Writer, current []journal.Adoption) error {
	if len(current) == 0 {
		fmt.Fprintln(w, "no orientation is adopted")
	}
	for _, a := range current {
		fmt.Fprintf(w, "%s of %s: candidate %s, adoption %d, digest %s\n%s", a.Target, scopeName(a.Scope),
			a.CandidateID, a.ID, a.Digest, a.Text)
		if !strings.HasSuffix(a.Text, "\n") {
			fmt.Fprintln(w)
		}
	}
	return nil
}

// printAdoptions writes one line an adoption.
func printAdoptions(w io.Writer, all []journal.Adoption) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ADOPTION\tAT\tSCOPE\tTARGET\tCANDIDATE\tREPLACED\tBY\tOPERATION\tDIGEST")
	for _, a := range all {
		replaced := "-"
		if a.Previous != 0 {
			replaced = fmt.Sprint(a.Previous)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s/%s\t%s\t%.12s\n", a.ID, stamp(a.AdoptedAt), scopeName(a.Scope),
			a.Target, a.CandidateID, replaced, a.By.Session, a.By.ExecutionID, a.OperationID, a.Digest)
	}
	return tw.Flush()
}

// listed reads records with the journal flags name, and prints them: one JSON object a
// line with asJSON, else as text writes them.
func listed[T any](cmd *cobra.Command, flags *dataFlags, asJSON bool, read func(context.Context, *journal.Journal) ([]T, error),
	text func(io.Writer, []T) error) error {
	j, err := flags.openJournal(cmd.Context())
	if err != nil {
		return err
	}
	defer j.Close()
	items, err := read(cmd.Context(), j)
	if err != nil {
		return err
	}
	if asJSON {
		return printJSONLines(cmd.OutOrStdout(), items)
	}
	return text(cmd.OutOrStdout(), items)
}

// currentAdoptions are the newest adoption of each scope and target of all, in the
// order they were adopted.
func currentAdoptions(all []journal.Adoption) []journal.Adoption {
	newest := map[string]int{}
	for i, a := range all {
		newest[scopeName(a.Scope)+"\x00"+a.Target] = i
	}
	var out []journal.Adoption
	for i, a := range all {
		if newest[scopeName(a.Scope)+"\x00"+a.Target] == i {
			out = append(out, a)
		}
	}
	return out
}

func scopeName(s journal.Scope) string {
	if s.Session != "" {
		return "session " + s.Session
	}
	return s.Kind
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// firstLine is s's first line, cut at n characters.
func firstLine(s string, n int) string {
	s, _, _ = strings.Cut(s, "\n")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
