package db

// PglockTypes lets the tests compare the types Translate knows with those the migrations create.
var PglockTypes = pglockTypes
