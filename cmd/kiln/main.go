// Command kiln is the kiln runtime's command line: it runs Python cells in a persistent
// workbench (kiln exec, kiln repl).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
)

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1 // a cell or run did not end ok, or kiln itself failed
	exitUsage = 2 // the command line was wrong
)

// usageError marks an error in how kiln was called.
type usageError struct{ error }

// failedError reports that the work ran but did not all end ok; its message has already
// been shown.
var errNotOK = errors.New("not every cell ended ok")

// annotationOneThread marks a command whose host serves one worker or one program
// (exec, repl, run). Its round trips hand work from goroutine to goroutine in turn,
// never two at once; with more than one runtime thread, each handoff wakes a thread on
// an idle CPU, which costs more than the work it hands over (docs/host.md, "CPUs").
// Such a command runs with GOMAXPROCS 1 unless the environment sets GOMAXPROCS. The
// daemon (serve, mcp) serves many sessions at once and keeps the runtime's default.
const annotationOneThread = "kiln.one-thread"

// oneThread is the Annotations of a command that runs with GOMAXPROCS 1.
var oneThread = map[string]string{annotationOneThread: "true"}

func main() {
	args := os.Args[1:]
	_, set := os.LookupEnv("GOMAXPROCS")
	if n := hostProcs(args, set); n > 0 {
		runtime.GOMAXPROCS(n)
	}
	os.Exit(run(context.Background(), args, os.Stdin, os.Stdout, os.Stderr))
}

// hostProcs is the GOMAXPROCS kiln runs args with: 1 for a command annotated
// annotationOneThread, unless the environment sets GOMAXPROCS (envSet); 0, the
// runtime's default, otherwise.
func hostProcs(args []string, envSet bool) int {
	if envSet {
		return 0
	}
	cmd, _, err := newRoot(nil, io.Discard, io.Discard).Find(args)
	if err != nil || cmd.Annotations[annotationOneThread] == "" {
		return 0
	}
	return 1
}

// run executes the command line args and returns the exit status. An error is a line
// on stderr, or under --json one JSON object on stdout; the exit status is the same.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot(stdin, stdout, stderr)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	var usage usageError
	switch {
	case err == nil, errors.Is(err, errNotOK):
	case jsonRequested(cmd, args):
		printError(stdout, err)
	case errors.As(err, &usage):
		fmt.Fprintf(stderr, "kiln: %s\nRun '%s --help' for usage.\n", unprefixed(usage.error), commandName(root, args))
	default:
		fmt.Fprintf(stderr, "kiln: %s\n", unprefixed(err))
	}
	return exitStatus(err)
}

// exitStatus is the exit status of a command that returned err.
func exitStatus(err error) int {
	var usage usageError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &usage):
		return exitUsage
	}
	return exitFail
}

// unprefixed is err's message without the "kiln: " that the library's errors begin
// with, since run adds its own.
func unprefixed(err error) string {
	return strings.TrimPrefix(err.Error(), "kiln: ")
}

// commandName is the command args name, "kiln exec" or "kiln", for the usage hint.
func commandName(root *cobra.Command, args []string) string {
	if cmd, _, err := root.Find(args); err == nil {
		return cmd.CommandPath()
	}
	return root.Name()
}

func newRoot(stdin io.Reader, stdout, stderr io.Writer) *cobra.Command {
	var asJSON bool
	root := &cobra.Command{
		Use:   "kiln",
		Short: "A runtime for AI agents that act by writing Python",
		Long: `kiln starts CPython workers, feeds them code, bounds what they send back and
answers the calls their code makes to the host.

  kiln exec 'x = 20' 'x + 1'     run cells in one fresh workbench
  kiln repl                      an interactive workbench
  kiln run prog.py               run a one-shot program (fd-3 protocol; not a sandbox)
  kiln log                       read the durable record of what cells did
  kiln send --session S TEXT     give a waiting agent an operator input
  kiln skills list               the skills an agent can load, and the refused ones
  kiln transcript show SESSION   what a model reads of a session
  kiln release build DIR         snapshot a policy source tree as a release
  kiln version                   the module version and revision of this binary`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Runnable, so that an unknown command is a usage error like any other.
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				return printJSON(cmd.OutOrStdout(), commandList(cmd))
			}
			return cmd.Help()
		},
	}
	addJSON(root, &asJSON, `print the commands as one JSON object: {"commands":[{"command","short"}]}`)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newExec(), newRepl(), newRun(), newInit(), newLog(), newSend(), newSkills(), newTranscript(), newRelease(), newHooks(), newVersion())
	root.AddCommand(newServe(), newSessions(), newMCP(), newStore())
	root.AddCommand(newChat(), newTurns(), newUsage())
	root.AddCommand(newApprove())
	root.AddCommand(newMaintenance(), newOrientation())
	return root
}

// exactArgs and friends turn cobra's argument checks into usage errors.
func usageArgs(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}
