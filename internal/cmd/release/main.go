// Command release builds, from the working tree, what tagging a release would put on a module
// proxy, and checks every module against it (RELEASING.md):
//
//	release proxy DIR  writes a file-based module proxy (GOPROXY=file://DIR) holding each
//	                   published module at the version the modules require: the zips the
//	                   release's tags will make
//	release check      checks each module of go.work: no replace, go.mod and go.sum tidy
//	                   against such a proxy (serving the unpublished modules too, for those
//	                   that require them), and its go line the oldest its requirements allow
//	release tidy       tidies each module of go.work against such a proxy (make generate)
//	release tags       prints the tags a release creates, once pglock.Version names the version
//
// It runs from anywhere in the repository. The published modules' own requirement on the root
// module names the version (all of them name the same one, or check says which differs).
package main

import (
	"fmt"
	"os"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "release:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return fmt.Errorf("usage: release proxy DIR | check | tidy | tags")
	}
	repo, err := findRepo()
	if err != nil {
		return err
	}
	switch {
	case args[0] == "proxy" && len(args) == 2:
		version, err := nextVersion(repo)
		if err != nil {
			return err
		}
		return writeProxy(repo, args[1], published, version)
	case args[0] == "check" && len(args) == 1:
		return check(repo, os.Stdout)
	case args[0] == "tidy" && len(args) == 1:
		return tidy(repo, os.Stdout)
	case args[0] == "tags" && len(args) == 1:
		return tags(repo, os.Stdout)
	}
	return fmt.Errorf("usage: release proxy DIR | check | tidy | tags")
}
