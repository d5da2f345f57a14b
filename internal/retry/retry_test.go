package retry_test

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
	"github.com/stretchr/testify/require"

	"github.com/pglock/pglock/internal/retry"
)

func TestTransientByClassOfSQLSTATE(t *testing.T) {
	t.Parallel()
	server := func(code string) error { return fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: code}) }
	for _, tc := range []struct {
		err       error
		transient bool
	}{
		{server(pgerrcode.ConnectionFailure), true},
		{server(pgerrcode.SerializationFailure), true},
		{server(pgerrcode.DeadlockDetected), true},
		{server(pgerrcode.TooManyConnections), true},
		{server(pgerrcode.AdminShutdown), true},
		{server(pgerrcode.CannotConnectNow), true},
		{server(pgerrcode.UniqueViolation), false},
		{server(pgerrcode.InvalidParameterValue), false},
		{server(pgerrcode.UndefinedFunction), false},
		{io.ErrUnexpectedEOF, true}, // the connection broke: no answer at all
		{puddle.ErrClosedPool, false},
		{fmt.Errorf("acquire: %w", puddle.ErrClosedPool), false},
		{context.DeadlineExceeded, true}, // a request's own time limit: the caller's ctx decides
		{nil, false},
	} {
		require.Equal(t, tc.transient, retry.Transient(tc.err), "%v", tc.err)
	}
}
