package observe

// NewWithDelay is New with a delivery delay of the test's.
var NewWithDelay = newEmitter
