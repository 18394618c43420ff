// Package kinds registers the job kinds that every slicework binary runs:
// the local host, the CLI and each Lambda function build their registry
// here, so a kind added once is known everywhere. To add a kind, write its
// package under shared/kinds/ and call its Register from Register below.
package kinds

import (
	"fmt"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/kinds/eventfanout"
	"github.com/slicework/slicework/shared/kinds/keycount"
	"github.com/slicework/slicework/shared/kinds/recompute"
)

// Register adds every built-in kind to r. It fails if r already holds one
// of them.
func Register(r *engine.Registry) error {
	for _, reg := range []func(*engine.Registry) error{
		keycount.Register,
		recompute.Register,
		eventfanout.Register,
	} {
		if err := reg(r); err != nil {
			return fmt.Errorf("kinds: %w", err)
		}
	}
	return nil
}

// Registry returns a new registry holding every built-in kind.
func Registry() (*engine.Registry, error) {
	r := engine.NewRegistry()
	if err := Register(r); err != nil {
		return nil, err
	}
	return r, nil
}
