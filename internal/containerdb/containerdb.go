package containerdb

import (
	"context"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"

	"github.com/pglock/pglock/internal/testdb"
)

// Image is the PostgreSQL image Fallback runs.
const Image = "postgres:15-alpine"

// Fallback is a testdb.Fallback: it runs Image when a Docker engine answers, and otherwise
// returns an error matching testdb.ErrNoServer.
func Fallback(ctx context.Context) (adminURL string, stop func() error, err error) {
	if !dockerAnswers(ctx) {
		return "", nil, fmt.Errorf("%w (and no Docker engine answers)", testdb.ErrNoServer)
	}
	container, err := tcpostgres.Run(ctx, Image,
		tcpostgres.WithUsername("postgres"), tcpostgres.WithPassword("postgres"),
		tcpostgres.WithDatabase("postgres"), tcpostgres.BasicWaitStrategies())
	if err != nil {
		return "", nil, fmt.Errorf("containerdb: %w", err)
	}
	stop = func() error { return testcontainers.TerminateContainer(container) }
	url, err := container.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		stop()
		return "", nil, fmt.Errorf("containerdb: %w", err)
	}
	return url, stop, nil
}

func dockerAnswers(ctx context.Context) (healthy bool) {
	defer func() {
		if recover() != nil { // testcontainers panics when it finds no Docker configuration
			healthy = false
		}
	}()
	provider, err := testcontainers.ProviderDocker.GetProvider()
	if err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return provider.Health(ctx) == nil
}
