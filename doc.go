// Package pglock coordinates work across processes with nothing but PostgreSQL.
//
// The subpackages each do one job: tablelock leases rows of the distributed_locks table with
// heartbeats and fencing tokens; migrations installs the SQL those packages (and any other
// language) call. This root package holds what they share: the errors every package returns,
// to be matched with errors.Is, and the rules for lock names.
package pglock
