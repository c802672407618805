package main

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestDescribeBuild(t *testing.T) {
	for _, c := range []struct {
		name string
		info *debug.BuildInfo
		want string
	}{
		{"no build information", nil, "kiln unknown revision unknown " + runtime.Version()},
		{"go run", &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Version: "(devel)"}},
			"kiln (devel) revision unknown go1.26.0"},
		{"a clean checkout", &debug.BuildInfo{
			GoVersion: "go1.26.0",
			Main:      debug.Module{Version: "v0.0.0-20261201170435-2019a9f1c2d3"},
			Settings: []debug.BuildSetting{
				{Key: "vcs", Value: "git"},
				{Key: "vcs.revision", Value: "2019a9f1c2d3e4f5"},
				{Key: "vcs.time", Value: "2026-12-01T17:04:35Z"},
				{Key: "vcs.modified", Value: "false"},
			},
		}, "kiln v0.0.0-20261201170435-2019a9f1c2d3 revision 2019a9f1c2d3e4f5 2026-12-01T17:04:35Z go1.26.0"},
		{"uncommitted changes", &debug.BuildInfo{
			GoVersion: "go1.26.0",
			Main:      debug.Module{Version: "v0.0.0-20261201170435-2019a9f1c2d3+dirty"},
			Settings: []debug.BuildSetting{
				{Key: "vcs.revision", Value: "2019a9f1c2d3e4f5"},
				{Key: "vcs.modified", Value: "true"},
			},
		}, "kiln v0.0.0-20261201170435-2019a9f1c2d3+dirty revision 2019a9f1c2d3e4f5 modified go1.26.0"},
	} {
		if got := readBuild(c.info).line(); got != c.want {
			t.Errorf("%s: got %q; want %q", c.name, got, c.want)
		}
	}
}
