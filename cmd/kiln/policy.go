package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/admin"
	"github.com/spf13/cobra"
)

func newHooks() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "hooks",
		Short: "Show the active policy's decision slots and their handlers",
		Long: `The behaviour policy answers two decision slots in a hooks worker: attention.plan
(every input: wake, defer or ignore) and delivery.review (every local.send: allow or
hold). The active policy is the release the durable record's behavior epoch names, or
kiln's initial release before any activation (kiln release activate).`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			return usageError{errors.New("name a subcommand: list or describe")}
		},
	}
	cmd.AddCommand(newHooksList(), newHooksDescribe())
	addJSON(cmd, nil, "print errors as JSON")
	return cmd
}

// activeHooks reads the behavior epoch and the handlers of its release.
func activeHooks(cmd *cobra.Command, flags *dataFlags) (admin.Hooks, error) {
	data, err := flags.dataDir()
	if err != nil {
		return admin.Hooks{}, err
	}
	return admin.ActiveHooks(cmd.Context(), data)
}

// releaseName names the release of an epoch's record, saying when it is kiln's initial one.
func releaseName(b admin.Behavior) string {
	if b.Initial() {
		return b.ReleaseID + " (kiln's initial release)"
	}
	return b.ReleaseID
}

func newHooksList() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the slots and the handlers of the active policy",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			h, err := activeHooks(cmd, &flags)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, h)
			}
			fmt.Fprintf(out, "epoch %d, release %s\n", h.Behavior.Epoch, releaseName(h.Behavior))
			for _, s := range h.Slots {
				fmt.Fprintf(out, "%-16s %s\n", s.Slot, s.Handler)
			}
			return nil
		},
	}
	flags.addData(cmd)
	addJSON(cmd, &asJSON, `print one JSON object: {"behavior","slots":[{"slot","handler"}]}`)
	return cmd
}

func newHooksDescribe() *cobra.Command {
	var flags dataFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "describe SLOT",
		Short: "Describe a slot: its handler, what it is given, what it may decide",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			desc, ok := admin.DescribeSlot(args[0])
			if !ok {
				return usageError{fmt.Errorf("no slot %q; the slots are %q", args[0], admin.HookSlots())}
			}
			h, err := activeHooks(cmd, &flags)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				return printJSON(out, map[string]any{"slot": args[0], "handler": h.Handler(args[0]),
					"budget_ms": admin.HookBudget.Milliseconds(), "description": desc})
			}
			fmt.Fprintf(out, "%s\nhandler: %s\nbudget: %s per invocation, queueing included\n", args[0], h.Handler(args[0]), admin.HookBudget)
			return writeDescription(out, desc)
		},
	}
	flags.addData(cmd)
	addJSON(cmd, &asJSON, `print one JSON object: {"slot","handler","budget_ms","description"}`)
	return cmd
}

// writeDescription prints a slot description's parts, by name.
func writeDescription(w io.Writer, desc admin.SlotDescription) error {
	for _, part := range []struct {
		name  string
		value any
	}{{"decisions", desc.Decisions}, {"input", desc.Input}, {"rules", desc.Rules}} {
		data, err := json.Marshal(part.value, json.Deterministic(true))
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s: %s\n", part.name, data)
	}
	return nil
}

func newReleaseActivate() *cobra.Command {
	var flags dataFlags
	var expected int64
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "activate ID --expected-epoch N",
		Short: "Make a stored release the active policy, if the epoch is still N",
		Long: `Validate the stored release ID, start its hooks worker through its handshake, and
only then move the durable record's behavior epoch from N to N+1 naming ID: a
compare-and-swap, the only way the active policy changes. A stale N changes nothing
and exits 1. A release whose hooks do not import never becomes active. Running
workbenches follow at their next cell; a cell keeps the policy it started with.`,
		Args: usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("expected-epoch") {
				return usageError{errors.New("--expected-epoch N is required (kiln release status shows it)")}
			}
			data, err := flags.dataDir()
			if err != nil {
				return err
			}
			b, err := admin.ActivateRelease(cmd.Context(), data, args[0], expected, admin.PolicyOptions{})
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), b)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "epoch %d, release %s\n", b.Epoch, releaseName(b))
			return nil
		},
	}
	flags.addData(cmd)
	cmd.Flags().Int64Var(&expected, "expected-epoch", 0, "the behavior epoch the activation expects (required)")
	addJSON(cmd, &asJSON, `print the new behavior as one JSON object: {"epoch","release_id","activated_at"}`)
	return cmd
}
