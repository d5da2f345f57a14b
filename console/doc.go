// Package console is a web console for operators: the locks, jobs, schedules and leaders of
// a database, on pages they can leave open, which refresh their tables themselves.
//
// New returns an http.Handler a host application mounts under any prefix; pglockctl serve runs
// it on its own. It reads through the same layer as pglockctl's commands. It is safe by
// default: read-only unless Options.ReadOnly says otherwise for a request (and the server
// refuses a POST in read-only mode, whatever the page shows), a Host header check against DNS
// rebinding, cross-origin POSTs refused (http.CrossOriginProtection), a strict
// Content-Security-Policy (no inline script or style), and no framing. Pages are plain
// html/template with hand-written CSS and one small script that only refreshes tables: every
// page works with JavaScript off.
package console
