// Package db holds the typed accessors sqlc generates from queries/ (every *.sql.go file, plus
// db.go and models.go) and, written by hand, the boundary where PostgreSQL errors become
// pglock's: build Queries as db.New(db.Translating(conn)), for a pool, a connection or a
// transaction alike, and never with WithTx, which would bypass it.
package db
