package fsblob_test

import (
	"testing"

	"github.com/slicework/slicework/shared/blob"
	"github.com/slicework/slicework/shared/blob/blobtest"
	"github.com/slicework/slicework/shared/blob/fsblob"
)

func TestConformance(t *testing.T) {
	blobtest.Run(t, func(t *testing.T) blob.Store {
		s, err := fsblob.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	})
}
