package testdb_test

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/pglock/pglock/internal/testdb"
)

// echoServer answers each connection with what it receives, transformed, and keeps all it
// received.
type echoServer struct {
	listener  net.Listener
	transform func([]byte) []byte
	mu        sync.Mutex
	received  bytes.Buffer
}

func newEchoServer(t *testing.T, transform func([]byte) []byte) *echoServer {
	t.Helper()
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &echoServer{listener: listener, transform: transform}
	go func() {
		for {
			conn, err := listener.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				buf := make([]byte, 1024)
				for {
					n, err := conn.Read(buf)
					if n > 0 {
						s.mu.Lock()
						s.received.Write(buf[:n])
						s.mu.Unlock()
						conn.Write(s.transform(buf[:n]))
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(func() { listener.Close() })
	return s
}

func (s *echoServer) got() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.received.String()
}

func dial(t *testing.T, p *testdb.Proxy) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p.Port)))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close() })
	return conn
}

func roundTrip(t *testing.T, conn net.Conn, send string) string {
	t.Helper()
	_, err := conn.Write([]byte(send))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
	buf := make([]byte, len(send))
	_, err = io.ReadFull(conn, buf)
	require.NoError(t, err)
	return string(buf)
}

// The relay the partition tests and the chaos suite stand on: a partition drops what is sent
// either way without closing anything, its heal closes exactly the connections it cut, a slowed
// relay delivers everything in order, a repoint moves new connections to the new upstream and
// cuts the old ones, and Close leaves no goroutine behind.
func TestProxyPartitionsSlowsRepointsAndCloses(t *testing.T) {
	defer goleak.VerifyNone(t)
	same := func(b []byte) []byte { return b }
	upper := func(b []byte) []byte { return bytes.ToUpper(b) }
	first, second := newEchoServer(t, same), newEchoServer(t, upper)
	p, err := testdb.NewProxy(first.listener.Addr().String())
	require.NoError(t, err)

	conn := dial(t, p)
	require.Equal(t, "hello", roundTrip(t, conn, "hello"))

	heal, err := p.Partition()
	require.NoError(t, err)
	duringPartition := dial(t, p)
	_, err = conn.Write([]byte("lost"))
	require.NoError(t, err)
	_, err = duringPartition.Write([]byte("lost too"))
	require.NoError(t, err)
	require.NoError(t, conn.SetReadDeadline(time.Now().Add(300*time.Millisecond)))
	_, err = conn.Read(make([]byte, 8))
	var timeout net.Error
	require.True(t, errors.As(err, &timeout) && timeout.Timeout(), "nothing comes back while partitioned: %v", err)
	require.NoError(t, heal())
	for _, cut := range []net.Conn{conn, duringPartition} {
		require.NoError(t, cut.SetReadDeadline(time.Now().Add(10*time.Second)))
		_, err = cut.Read(make([]byte, 8))
		require.Error(t, err, "a connection cut by the partition is closed at its heal")
		require.False(t, errors.Is(err, os.ErrDeadlineExceeded), "closed, not silent")
	}
	require.Equal(t, "hello", first.got(), "what was sent during the partition never arrived")

	healthy := dial(t, p)
	require.Equal(t, "again", roundTrip(t, healthy, "again"))

	undo, err := p.Slow(30, 10)
	require.NoError(t, err)
	for _, word := range []string{"one", "two", "three"} {
		_, err := healthy.Write([]byte(word))
		require.NoError(t, err)
	}
	require.NoError(t, healthy.SetReadDeadline(time.Now().Add(10*time.Second)))
	got := make([]byte, len("onetwothree"))
	_, err = io.ReadFull(healthy, got)
	require.NoError(t, err)
	require.Equal(t, "onetwothree", string(got), "slowed, in order, whole")
	require.NoError(t, undo())

	require.NoError(t, p.Repoint(second.listener.Addr().String()))
	require.NoError(t, healthy.SetReadDeadline(time.Now().Add(10*time.Second)))
	_, err = healthy.Read(make([]byte, 8))
	require.Error(t, err, "a repoint cuts the connections through the proxy")
	require.Equal(t, "MOVED", roundTrip(t, dial(t, p), "moved"), "new connections reach the new upstream")

	// What a server says as it closes (a FATAL, say) reaches the client, slowed or not.
	farewell, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() {
		for {
			conn, err := farewell.Accept()
			if err != nil {
				return
			}
			conn.Write([]byte("bye"))
			conn.Close()
		}
	}()
	require.NoError(t, p.Repoint(farewell.Addr().String()))
	for _, latency := range []int{0, 20} {
		undo, err := p.Slow(latency, 0)
		require.NoError(t, err)
		conn := dial(t, p)
		require.NoError(t, conn.SetReadDeadline(time.Now().Add(10*time.Second)))
		got, err := io.ReadAll(conn)
		require.NoError(t, err)
		require.Equal(t, "bye", string(got), "latency %d ms: the last words, then the close", latency)
		require.NoError(t, undo())
	}
	farewell.Close()

	p.Close()
	p.Close()
	require.Error(t, p.Repoint(first.listener.Addr().String()), "a closed proxy stays closed")
	first.listener.Close()
	second.listener.Close()
}
