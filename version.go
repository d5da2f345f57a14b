package pglock

// Version is the version of this module: what pglockctl version prints, and what CHANGELOG.md
// describes.
const Version = "v0.1.0"
