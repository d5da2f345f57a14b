// Package containerdb starts PostgreSQL in a container (testcontainers-go) for programs that
// find no other server: make demo and make bench pass Fallback to testdb.Throwaway. It is a
// module of its own so that Docker's client and its dependencies never enter the library's
// module graph, nor the graph of anyone who imports it.
package containerdb
