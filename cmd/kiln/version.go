package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
)

func newVersion() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print kiln's module version and the revision it was built from",
		Long: `Print the module version kiln was built as, the version control revision and time
of its source (with "modified" when the tree had uncommitted changes), and the Go
version that built it. A binary built without version control information (go run,
go test) says "unknown" for what it lacks.`,
		Args: usageArgs(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			info, _ := debug.ReadBuildInfo()
			fmt.Fprintln(cmd.OutOrStdout(), describeBuild(info))
			return nil
		},
	}
}

// describeBuild is the one line kiln version prints for info, which may be nil.
func describeBuild(info *debug.BuildInfo) string {
	version, revision, at, modified := "unknown", "unknown", "", false
	goVersion := runtime.Version()
	if info != nil {
		if info.Main.Version != "" {
			version = info.Main.Version
		}
		goVersion = info.GoVersion
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				revision = s.Value
			case "vcs.time":
				at = " " + s.Value
			case "vcs.modified":
				modified = s.Value == "true"
			}
		}
	}
	line := fmt.Sprintf("kiln %s revision %s%s", version, revision, at)
	if modified {
		line += " modified"
	}
	return line + " " + goVersion
}
