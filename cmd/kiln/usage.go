package main

import (
	"fmt"
	"sort"
	"text/tabwriter"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/agent"
	"github.com/spf13/cobra"
)

func newUsage() *cobra.Command {
	var flags dataFlags
	cmd := &cobra.Command{
		Use:   "usage [--data DIR]",
		Short: "Sum the agent's model usage by route and session, with the cache hit rate",
		Long: `Sum every model call of the data directory's agent sessions, by route and session:
calls, tokens as the routes reported them (input, cached, cache-written, output), the
cache hit rate (cached / input; "-" where the route said nothing of its cache), and
the cost in dollars ("-" where a count or a price was absent).`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := flags.openExisting(cmd.Context(), true)
			if err != nil {
				return err
			}
			defer st.Close()
			sessions, err := st.Sessions(cmd.Context())
			if err != nil {
				return err
			}
			names := map[int64]string{}
			for _, s := range sessions {
				names[s.ID] = s.Name
			}
			recs, err := st.AgentRecords(cmd.Context(), 0)
			if err != nil {
				return err
			}
			type key struct{ route, session string }
			sums := map[key]*agent.Totals{}
			for _, r := range recs {
				if r.Kind != "model_call" {
					continue
				}
				var c agent.ModelCall
				if err := json.Unmarshal(r.Body, &c); err != nil {
					return fmt.Errorf("record %d: %w", r.ID, err)
				}
				k := key{c.Route, names[r.SessionID]}
				if sums[k] == nil {
					sums[k] = &agent.Totals{}
				}
				sums[k].Add(c.Usage, c.CostMicros)
			}
			keys := make([]key, 0, len(sums))
			for k := range sums {
				keys = append(keys, k)
			}
			sort.Slice(keys, func(i, j int) bool {
				if keys[i].route != keys[j].route {
					return keys[i].route < keys[j].route
				}
				return keys[i].session < keys[j].session
			})
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ROUTE\tSESSION\tCALLS\tIN\tCACHED\tWRITE\tOUT\tHIT\tCOST")
			for _, k := range keys {
				t := sums[k]
				hit := "-"
				if rate, ok := t.HitRate(); ok {
					hit = fmt.Sprintf("%.1f%%", 100*rate)
				}
				fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\t%s\n", k.route, k.session, t.Calls, count(t.InputTokens),
					count(t.CachedTokens), count(t.CacheWrite), count(t.OutputTokens), hit, dollars(*t))
			}
			return tw.Flush()
		},
	}
	flags.addData(cmd)
	return cmd
}
