package split

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/slicework/slicework/shared/blob"
	"github.com/slicework/slicework/shared/job"
)

// Block is one data block of an explicit item list: the blob key of its
// NDJSON object, its 0-based index, and how many items it holds.
type Block struct {
	Key   string
	Index int64
	Items int64
}

// BlockKey returns the key of block i under prefix: prefix + "/" + the
// index as at least eight decimal digits + ".ndjson", so keys of up to
// 100,000,000 blocks sort in index order.
func BlockKey(prefix string, i int64) string {
	return prefix + "/" + fmt.Sprintf("%08d.ndjson", i)
}

// WriteBlocks stores items as NDJSON data blocks of per items each (the last
// may hold fewer) under BlockKey(prefix, i), and returns the blocks in
// order. Each item is compacted with json.Compact so it takes exactly one
// line; every line ends with '\n'. All items are validated before anything
// is written: an item that is not valid JSON is an error wrapping
// job.ErrInvalid that names its index. An empty prefix or per < 1 is an
// error wrapping job.ErrInvalid. No items gives no blocks. If a Put fails,
// blocks written before it stay in the store and the error names the key.
func WriteBlocks(ctx context.Context, s blob.Store, prefix string, items []json.RawMessage, per int) ([]Block, error) {
	switch {
	case s == nil:
		return nil, fmt.Errorf("split: write blocks: nil store: %w", job.ErrInvalid)
	case prefix == "":
		return nil, fmt.Errorf("split: write blocks: empty prefix: %w", job.ErrInvalid)
	case per < 1:
		return nil, fmt.Errorf("split: items per block %d: %w", per, job.ErrInvalid)
	}
	var data bytes.Buffer
	ends := make([]int, len(items)) // ends[i] is the end of item i's line in data
	for i, it := range items {
		if err := json.Compact(&data, it); err != nil {
			return nil, fmt.Errorf("split: item %d is not valid JSON (%v): %w", i, err, job.ErrInvalid)
		}
		data.WriteByte('\n')
		ends[i] = data.Len()
	}
	raw := data.Bytes()
	blocks := make([]Block, 0, (len(items)+per-1)/per)
	for lo := 0; lo < len(items); lo += per {
		hi := min(lo+per, len(items))
		from := 0
		if lo > 0 {
			from = ends[lo-1]
		}
		b := Block{Key: BlockKey(prefix, int64(len(blocks))), Index: int64(len(blocks)), Items: int64(hi - lo)}
		if err := s.Put(ctx, b.Key, bytes.NewReader(raw[from:ends[hi-1]])); err != nil {
			return nil, fmt.Errorf("split: write block %s: %w", b.Key, err)
		}
		blocks = append(blocks, b)
	}
	return blocks, nil
}

// ReadBlock returns the items of the NDJSON data block at key, in order,
// one per non-empty line ("\r\n" endings are accepted). A line that is not
// valid JSON is an error wrapping job.ErrInvalid that names its line
// number; a missing block yields the store's error (job.ErrNotFound).
func ReadBlock(ctx context.Context, s blob.Store, key string) ([]json.RawMessage, error) {
	if s == nil {
		return nil, fmt.Errorf("split: read block: nil store: %w", job.ErrInvalid)
	}
	rc, err := s.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("split: read block %s: %w", key, err)
	}
	defer rc.Close()
	br := bufio.NewReader(rc)
	var items []json.RawMessage
	for lineNo := 1; ; lineNo++ {
		line, err := br.ReadBytes('\n')
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("split: read block %s: %w", key, err)
		}
		trimmed := bytes.TrimSuffix(bytes.TrimSuffix(line, []byte("\n")), []byte("\r"))
		if len(trimmed) > 0 {
			if !json.Valid(trimmed) {
				return nil, fmt.Errorf("split: block %s line %d is not valid JSON: %w", key, lineNo, job.ErrInvalid)
			}
			items = append(items, json.RawMessage(trimmed))
		}
		if err != nil { // io.EOF
			return items, nil
		}
	}
}
