package main

import (
	"fmt"
	"io"
	"runtime/debug"
)

const versionUsage = `Usage: ormlock --version (or ormlock version)

Prints the module version ormlock was built from, as go install records it
("(devel)" and the commit for a build from a work tree), and its Go version.

Examples:
  ormlock --version
  # ormlock v0.4.0 (go1.26.0)
`

// versionCmd prints the module version ormlock was built from, as
// go install records it ("(devel)" for a build from a work tree), and the
// Go version, e.g. "ormlock v0.4.0 (go1.26.0)".
func versionCmd(args []string, stdout io.Writer) error {
	if len(args) == 1 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprint(stdout, versionUsage)
		return nil
	}
	if len(args) != 0 {
		return usagef("--version takes no arguments, got %q", args)
	}
	fmt.Fprintln(stdout, "ormlock "+version(debug.ReadBuildInfo))
	return nil
}

// version is the version line of the build that readInfo describes.
func version(readInfo func() (*debug.BuildInfo, bool)) string {
	info, ok := readInfo()
	if !ok {
		return "(devel) (no build information)"
	}
	v := info.Main.Version
	if v == "" {
		v = "(devel)"
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" && v == "(devel)" && len(s.Value) >= 12 {
			v += " " + s.Value[:12]
		}
	}
	return v + " (" + info.GoVersion + ")"
}
