// Validates pprof files strictly with pprof's own parser: profile.Parse, then CheckValid.
// Build: GO111MODULE=off GOPATH=/usr/share/gocode go build validate_pprof.go (Debian's
// golang-github-google-pprof-dev). Usage: validate_pprof FILE...; exit status 1 on the first
// invalid file.
package main

import (
	"fmt"
	"os"

	"github.com/google/pprof/profile"
)

func main() {
	for _, path := range os.Args[1:] {
		f, err := os.Open(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		p, err := profile.Parse(f)
		f.Close()
		if err == nil {
			err = p.CheckValid()
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", path, err)
			os.Exit(1)
		}
		fmt.Printf("%s: valid, %d samples\n", path, len(p.Sample))
	}
}
