package main

import (
	"fmt"
	"text/tabwriter"

	"github.com/kilnrt/kiln/journal"
	"github.com/spf13/cobra"
)

func newUsage() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "usage [--data DIR]",
		Short: "Sum the agent's model usage by route and session, with the cache hit rate",
		Long: `Sum every model call of the data directory's agent sessions, by route and session:
calls, tokens as the routes reported them (input, cached, cache-written, output), the
cache hit rate (cached / input; "-" where the route said nothing of its cache), and
the cost in dollars ("-" where a count or a price was absent).`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			j, err := flags.openJournal(cmd.Context())
			if err != nil {
				return err
			}
			defer j.Close()
			sums, err := j.UsageByRoute(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if sums == nil {
					sums = []journal.RouteUsage{}
				}
				return printJSON(cmd.OutOrStdout(), sums)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ROUTE\tSESSION\tCALLS\tIN\tCACHED\tWRITE\tOUT\tHIT\tCOST")
			for _, u := range sums {
				t := u.Totals
				hit := "-"
				if rate, ok := t.HitRate(); ok {
					hit = fmt.Sprintf("%.1f%%", 100*rate)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", u.Route, u.Session, t.Calls, tokenText(t.InputTokens),
					tokenText(t.CachedTokens), tokenText(t.CacheWrite), tokenText(t.OutputTokens), hit, t.CostText())
			}
			return tw.Flush()
		},
	}
	flags.addData(cmd)
	addJSON(cmd, &asJSON, `print the sums as one JSON array: [{"route","session","totals"}]`)
	return cmd
}
