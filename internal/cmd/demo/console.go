package main

import (
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pglock/pglock/console"
)

// serveConsole serves pglock's console, read-only (its default), on a loopback port of its own.
func serveConsole(pool *pgxpool.Pool) (addr string, stop func(), err error) {
	h, err := console.New(pool, nil)
	if err != nil {
		return "", nil, err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(l)
	return l.Addr().String(), func() { srv.Close() }, nil
}
