package main

import (
	"fmt"
	"io"
	"runtime"

	"github.com/spf13/cobra"

	"github.com/pglock/pglock"
	"github.com/pglock/pglock/migrations"
)

func versionCommand(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use: "version", Short: "Show pglockctl's version and the SQL version it installs", Args: args(cobra.NoArgs),
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(stdout, "pglockctl %s (%s), SQL contract %d\n", pglock.Version, runtime.Version(), migrations.Latest())
			return err
		},
	}
}
