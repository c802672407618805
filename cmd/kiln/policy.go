package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/go-json-experiment/json"
	"github.com/kilnrt/kiln/internal/interp"
	"github.com/kilnrt/kiln/internal/policy"
	"github.com/kilnrt/kiln/internal/release"
	"github.com/kilnrt/kiln/internal/store"
	"github.com/kilnrt/kiln/internal/wire"
	kilnpy "github.com/kilnrt/kiln/python"
	"github.com/spf13/cobra"
)

// openPolicy is the policy the record's behavior epoch names, for a command that
// decides or activates outside a workbench.
func openPolicy(ctx context.Context, st *store.Store, session string) (*policy.Manager, error) {
	python, err := interp.Find(ctx, "python3")
	if err != nil {
		return nil, err
	}
	return policy.NewManager(ctx, st, st.Dir(), policy.Config{Python: python.Path, Package: kilnpy.Sources(), SessionID: session})
}

// describeAttention says an attention decision in a line.
func describeAttention(a policy.Attention) string {
	var s string
	switch a.Action {
	case "wake":
		s = "wake, priority " + strconv.Itoa(*a.Priority)
	case "defer":
		s = fmt.Sprintf("defer %gs", *a.Seconds)
	default:
		s = "ignore: " + a.Reason
	}
	if a.Note != "" {
		s += " (" + a.Note + ")"
	}
	return s
}

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
	return cmd
}

// activeHandlers reads the behavior epoch and the handlers of its release.
func activeHandlers(cmd *cobra.Command, flags *dataFlags) (store.Behavior, map[string]string, error) {
	st, err := flags.openExisting(cmd.Context(), true)
	if err != nil {
		return store.Behavior{}, nil, err
	}
	defer st.Close()
	b, err := st.Behavior(cmd.Context())
	if err != nil {
		return store.Behavior{}, nil, err
	}
	m, err := policy.NewManager(cmd.Context(), st, st.Dir(), policy.Config{})
	if err != nil {
		return b, nil, err
	}
	defer m.Close()
	handlers, err := m.Active().Handlers()
	return b, handlers, err
}

// releaseName names the release of an epoch's record, saying when it is kiln's initial one.
func releaseName(b store.Behavior) string {
	if b.ReleaseID == policy.Initial().ID {
		return b.ReleaseID + " (kiln's initial release)"
	}
	return b.ReleaseID
}

func newHooksList() *cobra.Command {
	var flags dataFlags
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the slots and the handlers of the active policy",
		Args:  usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			b, handlers, err := activeHandlers(cmd, &flags)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "epoch %d, release %s\n", b.Epoch, releaseName(b))
			for _, slot := range wire.Slots {
				fmt.Fprintf(out, "%-16s %s\n", slot, handlers[slot])
			}
			return nil
		},
	}
	flags.addData(cmd)
	return cmd
}

func newHooksDescribe() *cobra.Command {
	var flags dataFlags
	cmd := &cobra.Command{
		Use:   "describe SLOT",
		Short: "Describe a slot: its handler, what it is given, what it may decide",
		Args:  usageArgs(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			desc, ok := policy.SlotDescriptions[args[0]]
			if !ok {
				return usageError{fmt.Errorf("no slot %q; the slots are %q", args[0], wire.Slots)}
			}
			_, handlers, err := activeHandlers(cmd, &flags)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s\nhandler: %s\nbudget: %s per invocation, queueing included\n", args[0], handlers[args[0]], policy.Budget)
			writeDescription(out, desc)
			return nil
		},
	}
	flags.addData(cmd)
	return cmd
}

// writeDescription prints a slot description's parts in a stable order.
func writeDescription(w io.Writer, desc map[string]any) {
	keys := make([]string, 0, len(desc))
	for k := range desc {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		data, _ := json.Marshal(desc[k], json.Deterministic(true))
		fmt.Fprintf(w, "%s: %s\n", k, data)
	}
}

func newReleaseActivate() *cobra.Command {
	var flags dataFlags
	var expected int64
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
			st, err := flags.openStore(cmd.Context())
			if err != nil {
				return err
			}
			defer st.Close()
			m, err := openPolicy(cmd.Context(), st, "release")
			if err != nil {
				return err
			}
			defer m.Close()
			b, err := m.Activate(cmd.Context(), release.Dir(st.Dir(), args[0]), expected)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "epoch %d, release %s\n", b.Epoch, releaseName(b))
			return nil
		},
	}
	flags.addData(cmd)
	cmd.Flags().Int64Var(&expected, "expected-epoch", 0, "the behavior epoch the activation expects (required)")
	return cmd
}
