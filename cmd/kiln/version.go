package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newVersion() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print kiln's module version and the revision it was built from",
		Long: `Print the module version kiln was built as, the version control revision and time
of its source (with "modified" when the tree had uncommitted changes), and the Go
version that built it. A binary built without version control information (go run,
go test) says "unknown" for what it lacks.

With --json, one object: {"version","revision","time","modified","go"}, time "" when
unknown.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, _ := debug.ReadBuildInfo()
			b := readBuild(info)
			if asJSON {
				return printJSON(cmd.OutOrStdout(), b)
			}
			fmt.Fprintln(cmd.OutOrStdout(), b.line())
			return nil
		},
	}
	addJSON(cmd, &asJSON, `print one JSON object: {"version","revision","time","modified","go"}`)
	return cmd
}

// build is what kiln version says of the binary.
type build struct {
	Version  string `json:"version"`  // the module version, or "unknown"
	Revision string `json:"revision"` // the version control revision, or "unknown"
	Time     string `json:"time"`     // the revision's time; "" when unknown
	Modified bool   `json:"modified"` // the tree had uncommitted changes
	Go       string `json:"go"`       // the Go version that built it
}

// readBuild is what info, which may be nil, says of the binary.
func readBuild(info *debug.BuildInfo) build {
	b := build{Version: "unknown", Revision: "unknown", Go: runtime.Version()}
	if info != nil {
		if info.Main.Version != "" {
			b.Version = info.Main.Version
		}
		b.Go = info.GoVersion
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.time":
				b.Time = s.Value
			case "vcs.modified":
				b.Modified = s.Value == "true"
			}
		}
	}
	return b
}

// line is the one line kiln version prints.
func (b build) line() string {
	line := fmt.Sprintf("kiln %s revision %s", b.Version, b.Revision)
	if b.Time != "" {
		line += " " + b.Time
	}
	if b.Modified {
		line += " modified"
	}
	return line + " " + b.Go
}
