package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"
)

// app is what every command shares: where to connect, how to print.
type app struct {
	databaseURL string
	output      string // "table" or "json"
	stdout      io.Writer
}

func newRoot(stdout io.Writer) *cobra.Command {
	a := &app{stdout: stdout}
	root := &cobra.Command{
		Use:           "pglockctl",
		Short:         "See and manage pglock's locks",
		Long:          "pglockctl shows who holds which pglock lock, since when, until when and who waits, and migrates, force-releases and cleans up.",
		SilenceErrors: true,
		SilenceUsage:  true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if a.output != "table" && a.output != "json" {
				return usagef("-o must be table or json, not %q", a.output)
			}
			return nil
		},
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.PersistentFlags().StringVar(&a.databaseURL, "database-url", "",
		"PostgreSQL URL or keyword=value string (default: $DATABASE_URL, else the libpq PG* variables)")
	root.PersistentFlags().StringVarP(&a.output, "output", "o", "table", "output format: table or json")
	root.AddCommand(a.migrateCommand(), a.listCommand(), a.releaseCommand(), a.jobsCommand(), a.leaderCommand(), a.cronCommand(), a.gcCommand(), a.doctorCommand(), a.serveCommand(), versionCommand(stdout))
	return root
}

// connect opens a small pool. Its errors name the server but never the password.
func (a *app) connect(ctx context.Context) (*pgxpool.Pool, error) {
	url := a.databaseURL
	if url == "" {
		url = os.Getenv("DATABASE_URL") // empty: pgx reads the libpq PG* variables
	}
	config, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, usagef("cannot parse the database URL (%s)", redacted(err))
	}
	config.MaxConns = 2
	config.ConnConfig.RuntimeParams["application_name"] = "pglockctl"
	pool, err := pgxpool.NewWithConfig(ctx, config)
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		if pool != nil {
			pool.Close()
		}
		return nil, fmt.Errorf("connect to %s@%s:%d/%s: %s", config.ConnConfig.User, config.ConnConfig.Host,
			config.ConnConfig.Port, config.ConnConfig.Database, redacted(err))
	}
	return pool, nil
}

// withPool runs fn with a pool that is closed afterwards.
func (a *app) withPool(cmd *cobra.Command, fn func(ctx context.Context, pool *pgxpool.Pool) error) error {
	pool, err := a.connect(cmd.Context())
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(cmd.Context(), pool)
}
