package main

import (
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/pglock/pglock/migrations"
)

func versionCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use: "version", Short: "Show pglockctl's version and the SQL version it installs", Args: args(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			version, goVersion := "(devel)", ""
			if info, ok := debug.ReadBuildInfo(); ok {
				version, goVersion = info.Main.Version, info.GoVersion
			}
			_, err := fmt.Fprintf(stdout, "pglockctl %s (%s), SQL contract %d\n", version, goVersion, migrations.Latest())
			return err
		},
	}
}
