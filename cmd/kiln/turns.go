package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/kilnrt/kiln/journal"
	"github.com/spf13/cobra"
)

func newTurns() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "turns SESSION [--json]",
		Short: "List an agent session's turns: trigger, steps, end reason, tokens, cost",
		Long: `List the turns the agent of SESSION ran, in order: the inputs that started each, its
steps, its one end reason, the tokens its model calls used as their routes reported
them (input, cached, cache-written, output; "-" where no route said), and its cost in
dollars ("-" where a count or a price was absent). --json prints each turn whole, one
object a line: {"start", "end" (null while it runs), "calls", "folds"}.

'kiln turns cancel SESSION' cancels the running turn of a session in kiln serve.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			return listed(cmd, &flags, asJSON, func(ctx context.Context, j *journal.Journal) ([]journal.Turn, error) {
				return j.Turns(ctx, args[0])
			}, func(w io.Writer, turns []journal.Turn) error {
				printTurns(w, turns)
				return nil
			})
		},
	}
	flags.addData(cmd)
	addJSON(cmd, &asJSON, "print one JSON object per turn")
	cmd.AddCommand(newTurnsCancel(), newTurnsResume())
	return cmd
}

// printTurns writes one line a turn.
func printTurns(w io.Writer, turns []journal.Turn) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TURN\tTRIGGER\tSTEPS\tEND\tIN\tCACHED\tWRITE\tOUT\tCOST")
	for _, t := range turns {
		totals := t.Totals()
		turn, trigger, steps, end := "?", "-", "-", "running"
		if t.Start != nil {
			turn = fmt.Sprint(t.Start.Turn)
			var ids []string
			for _, id := range t.Start.Trigger {
				ids = append(ids, journal.InputRef(id))
			}
			if len(ids) > 0 {
				trigger = strings.Join(ids, ",")
			}
		}
		if t.End != nil {
			turn, steps, end = fmt.Sprint(t.End.Turn), fmt.Sprint(t.End.Steps), string(t.End.EndReason)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", turn, trigger, steps, end, tokenText(totals.InputTokens),
			tokenText(totals.CachedTokens), tokenText(totals.CacheWrite), tokenText(totals.OutputTokens), totals.CostText())
	}
	tw.Flush()
}

// tokenText is a token count as the tables show it: "-" when the route reported none.
func tokenText(n *int64) string {
	if n == nil {
		return "-"
	}
	return strconv.FormatInt(*n, 10)
}
