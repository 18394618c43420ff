// Command slicework is the slicework command line; see shared/cli.
package main

import (
	"os"

	"github.com/slicework/slicework/shared/cli"
)

func main() { os.Exit(cli.Main(os.Args[1:])) }
