package pglock

import "errors"

// The errors pglock returns, wrapped with detail; match them with errors.Is.
var (
	// ErrLocked means the lock is held by someone else.
	ErrLocked = errors.New("pglock: lock is held by another holder")

	// ErrNotHeld means the caller does not hold the lock it tried to extend or release.
	ErrNotHeld = errors.New("pglock: lock is not held")

	// ErrLockLost means a lock the caller held is no longer its own: it expired, was
	// force-released, or its connection died.
	ErrLockLost = errors.New("pglock: lock lost")

	// ErrNoFencingToken means a lock that has no fencing token was asked for one: a Redlock
	// lock (package redislock), whose nodes cannot agree on a number that only grows. Its
	// Token panics with an error matching it rather than return a number that fences nothing.
	ErrNoFencingToken = errors.New("pglock: this lock has no fencing token")

	// ErrInvalidName means a lock name that no lock may have; see ValidateName.
	ErrInvalidName = errors.New("pglock: invalid lock name")

	// ErrInvalidTTL means a lease duration out of the accepted range.
	ErrInvalidTTL = errors.New("pglock: invalid TTL")

	// ErrInvalidArgument means any other argument that cannot be used, such as a nil pool.
	ErrInvalidArgument = errors.New("pglock: invalid argument")

	// ErrLockTimeout means a wait for a lock ended at its time limit (a context deadline, a
	// tablelock WaitTimeout, or PostgreSQL's lock_timeout: SQLSTATE 55P03).
	ErrLockTimeout = errors.New("pglock: timed out waiting for lock")

	// ErrClosed means the Locker (or other pglock object) was closed.
	ErrClosed = errors.New("pglock: closed")

	// ErrNotMigrated means the database lacks pglock's tables or functions.
	ErrNotMigrated = errors.New("pglock: database is not migrated (run `pglockctl migrate up`)")

	// ErrNotFound means there is no record of what was asked for, such as a job key.
	ErrNotFound = errors.New("pglock: not found")

	// ErrGaveUp means a job failed as many times as it may: no delivery runs it again until it
	// is forgotten.
	ErrGaveUp = errors.New("pglock: gave up after the maximum number of attempts")

	// ErrFingerprintMismatch means a job key was delivered again with a payload (fingerprint)
	// other than the one it was first delivered with.
	ErrFingerprintMismatch = errors.New("pglock: key seen before with a different fingerprint")

	// ErrNoLeader means an election has no leader now.
	ErrNoLeader = errors.New("pglock: no leader")

	// ErrRateLimited means an event did not fit its rate limit in the time there was.
	ErrRateLimited = errors.New("pglock: rate limited")

	// ErrSaturated means an acquisition refused because the renewals of the leases its process
	// already holds are falling behind (more than half a heartbeat): those come first. It
	// passes once renewals catch up; Stats and EventRenewalLag tell how far behind they are.
	ErrSaturated = errors.New("pglock: saturated: renewals of the leases held are falling behind")

	// ErrInvalidSpec means a cron spec that cannot be parsed or never fires.
	ErrInvalidSpec = errors.New("pglock: invalid cron spec")

	// ErrExists means a name that is taken: a schedule defined with the name of one that exists
	// (at runtime or in code), or a schedule in code named as a runtime one.
	ErrExists = errors.New("pglock: already exists")

	// ErrDefinedInCode means a change asked of a schedule that its instances' code defines
	// (Scheduler.Add): change it there.
	ErrDefinedInCode = errors.New("pglock: defined in code")

	// ErrReplaced means a cron run was canceled because a newer run of its schedule replaced
	// it (the Replace overlap policy): the cause of the run's context.
	ErrReplaced = errors.New("pglock: replaced by a newer run")

	// ErrSuperseded means a job attempt was canceled because a newer delivery of its key, in
	// the jobs.Supersede mode, took the key over: the cause of the attempt's context, which
	// matches ErrLockLost too. The attempt's fence checks and outcome are refused from then.
	ErrSuperseded = errors.New("pglock: superseded by a newer delivery")

	// ErrUnsafeSchema means pglock will not migrate a schema where another role could make the
	// migrating role run its code: one every role may create objects in (SQLSTATE 42501 from
	// the migrations), or one whose version table someone else made.
	ErrUnsafeSchema = errors.New("pglock: schema is not safe to migrate")

	// ErrSchemaDrift means pglock's objects in the database differ from those its installed
	// version made: a function edited by hand, say. migrations.Repair makes the functions again.
	ErrSchemaDrift = errors.New("pglock: installed SQL differs from its version's")

	// ErrSchemaTooNew means the database holds a version of pglock's SQL newer than this
	// module's migrations: a later release installed it.
	ErrSchemaTooNew = errors.New("pglock: schema version is newer than this module's")

	// ErrSchemaDirty means a migration failed and left its version marked dirty.
	ErrSchemaDirty = errors.New("pglock: schema version is dirty")

	// ErrPermissionDenied means the role lacks a privilege the operation needs.
	ErrPermissionDenied = errors.New("pglock: permission denied")
)
