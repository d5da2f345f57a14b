package main

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/pglock/pglock/console"
)

// tokenEnv holds the password the console asks for (HTTP basic authentication, any user name).
const tokenEnv = "PGLOCK_CONSOLE_TOKEN"

func (a *app) serveCommand() *cobra.Command {
	var listen string
	var hosts []string
	var insecure, allowActions bool
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Serve the web console: locks, jobs, schedules and leaders, refreshed live",
		Long: "serve runs the console (docs/console.md) on --listen, 127.0.0.1:8080 by default, read-only unless " +
			"--allow-actions. " +
			"A non-loopback address needs authentication: the password in $" + tokenEnv + " (HTTP basic " +
			"authentication, any user name), or --insecure, which serves anyone who can reach it and says so.",
		Args: args(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			host, _, err := net.SplitHostPort(listen)
			if err != nil {
				return usagef("--listen %q: %v", listen, err)
			}
			token := os.Getenv(tokenEnv)
			loopback := isLoopback(host)
			if !loopback && token == "" && !insecure {
				return usagef("--listen %s is not a loopback address: set $%s (the console's password) or pass --insecure", listen, tokenEnv)
			}
			if !loopback && token == "" && allowActions {
				return usagef("--allow-actions on a non-loopback address needs $%s: anyone could act", tokenEnv)
			}
			return a.withPool(cmd, func(ctx context.Context, pool *pgxpool.Pool) error {
				allowed := hosts
				if !loopback && len(allowed) == 0 && host != "" && host != "0.0.0.0" && host != "::" {
					allowed = []string{host}
				}
				logger := slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), nil))
				h, err := console.New(pool, &console.Options{AllowedHosts: allowed, Logger: logger,
					ReadOnly: func(*http.Request) bool { return !allowActions }})
				if err != nil {
					return err
				}
				if token != "" {
					h = withToken(h, token)
				} else if !loopback {
					fmt.Fprintf(cmd.ErrOrStderr(), "pglockctl serve: WARNING: --insecure: anyone who reaches %s sees the console, unauthenticated\n", listen)
				}
				return serve(ctx, listen, h, a.stdout)
			})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:8080", "the address to serve on")
	cmd.Flags().StringSliceVar(&hosts, "host", nil, "a host name browsers reach the console by (default: loopback names, or --listen's host)")
	cmd.Flags().BoolVar(&insecure, "insecure", false, "serve a non-loopback address without authentication")
	cmd.Flags().BoolVar(&allowActions, "allow-actions", false, "let the console release locks, pause schedules and the like (confirmed, logged)")
	return cmd
}

func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// withToken asks for the token as the password of HTTP basic authentication.
func withToken(next http.Handler, token string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, password, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(password), []byte(token)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="pglock console", charset="UTF-8"`)
			http.Error(w, "pglock console: authentication required", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// serve serves h on listen until ctx ends, then shuts down.
func serve(ctx context.Context, listen string, h http.Handler, out io.Writer) error {
	l, err := net.Listen("tcp", listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	fmt.Fprintf(out, "pglock console at http://%s/\n", l.Addr())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(shutdownCtx); err != nil {
			return err
		}
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			return err
		}
		return nil
	}
}
