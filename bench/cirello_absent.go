//go:build !cirello

package main

// Built without cirello.io/pglock's source (make bench found no clone of it): its column is left
// out, and the report says so.
var cirelloDesign *design

const cirelloFillSQL = ""

// cirelloTable is the peer's table, absent without its source.
const cirelloTable = ""

func cirelloCommit() string { return "" }
