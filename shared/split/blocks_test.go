package split

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/slicework/slicework/shared/blob"
	"github.com/slicework/slicework/shared/blob/fsblob"
	"github.com/slicework/slicework/shared/job"
	"pgregory.net/rapid"
)

// memStore is an in-memory blob.Store for fast property tests.
type memStore struct {
	mu   sync.Mutex
	objs map[string][]byte
}

var _ blob.Store = (*memStore)(nil)

func newMemStore() *memStore { return &memStore{objs: map[string][]byte{}} }

func (m *memStore) Put(_ context.Context, key string, r io.Reader) error {
	if err := fsblob.ValidKey(key); err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objs[key] = data
	return nil
}

func (m *memStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return m.GetRange(ctx, key, 0, 1<<62)
}

func (m *memStore) GetRange(_ context.Context, key string, off, length int64) (io.ReadCloser, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.objs[key]
	if !ok {
		return nil, fmt.Errorf("object %s: %w", key, job.ErrNotFound)
	}
	return io.NopCloser(io.NewSectionReader(bytes.NewReader(data), off, length)), nil
}

func (m *memStore) Head(_ context.Context, key string) (blob.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	data, ok := m.objs[key]
	if !ok {
		return blob.Info{}, fmt.Errorf("object %s: %w", key, job.ErrNotFound)
	}
	return blob.Info{Key: key, Size: int64(len(data)), Modified: time.Time{}}, nil
}

func (m *memStore) List(_ context.Context, prefix string) ([]blob.Info, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []blob.Info
	for k, v := range m.objs {
		if strings.HasPrefix(k, prefix) {
			out = append(out, blob.Info{Key: k, Size: int64(len(v))})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

func (m *memStore) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objs, key)
	return nil
}

// compactJSON returns raw compacted, for comparing items.
func compactJSON(t interface{ Fatalf(string, ...any) }, raw json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		t.Fatalf("compact %q: %v", raw, err)
	}
	return b.String()
}

func TestBlocksRoundTripProperty(t *testing.T) {
	t.Parallel()
	item := rapid.OneOf(
		rapid.Map(rapid.Int(), func(i int) json.RawMessage { return json.RawMessage(fmt.Sprint(i)) }),
		rapid.Map(rapid.String(), func(s string) json.RawMessage {
			b, _ := json.Marshal(s)
			return b
		}),
		rapid.Map(rapid.IntRange(0, 99), func(i int) json.RawMessage {
			// Pretty-printed object spanning several lines.
			return json.RawMessage(fmt.Sprintf("{\n  \"id\": %d,\n  \"tags\": [ \"a\",\n \"b\" ]\n}\n", i))
		}),
	)
	rapid.Check(t, func(t *rapid.T) {
		ctx := context.Background()
		items := rapid.SliceOfN(item, 0, 60).Draw(t, "items")
		per := rapid.IntRange(1, 70).Draw(t, "per")
		s := newMemStore()
		blocks, err := WriteBlocks(ctx, s, "jobs/j1/blocks", items, per)
		if err != nil {
			t.Fatal(err)
		}
		if want := (len(items) + per - 1) / per; len(blocks) != want {
			t.Fatalf("%d blocks, want %d", len(blocks), want)
		}
		var got []string
		for i, b := range blocks {
			if b.Index != int64(i) || b.Key != BlockKey("jobs/j1/blocks", int64(i)) {
				t.Fatalf("block %d = %+v", i, b)
			}
			if b.Items < 1 || b.Items > int64(per) || (i < len(blocks)-1 && b.Items != int64(per)) {
				t.Fatalf("block %d holds %d items, per %d", i, b.Items, per)
			}
			read, err := ReadBlock(ctx, s, b.Key)
			if err != nil {
				t.Fatal(err)
			}
			if int64(len(read)) != b.Items {
				t.Fatalf("block %d: read %d items, want %d", i, len(read), b.Items)
			}
			for _, r := range read {
				got = append(got, string(r))
			}
		}
		want := []string{}
		for _, it := range items {
			want = append(want, compactJSON(t, it))
		}
		if got == nil {
			got = []string{}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("items = %q, want %q", got, want)
		}
		if objs, _ := s.List(ctx, ""); len(objs) != len(blocks) {
			t.Fatalf("%d objects stored, want %d", len(objs), len(blocks))
		}
	})
}

func TestBlocksFSBlob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s, err := fsblob.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	items := []json.RawMessage{
		json.RawMessage(`{"a": 1}`), json.RawMessage(`"two"`), json.RawMessage("[\n3\n]"),
		json.RawMessage(`null`), json.RawMessage(` 5 `),
	}
	blocks, err := WriteBlocks(ctx, s, "jobs/x/items", items, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []Block{
		{Key: "jobs/x/items/00000000.ndjson", Index: 0, Items: 2},
		{Key: "jobs/x/items/00000001.ndjson", Index: 1, Items: 2},
		{Key: "jobs/x/items/00000002.ndjson", Index: 2, Items: 1},
	}
	if !reflect.DeepEqual(blocks, want) {
		t.Fatalf("blocks = %+v, want %+v", blocks, want)
	}
	rc, err := s.Get(ctx, want[1].Key)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(rc)
	rc.Close()
	if err != nil {
		t.Fatal(err)
	}
	if string(raw) != "[3]\nnull\n" {
		t.Fatalf("block 1 content = %q", raw)
	}
	got, err := ReadBlock(ctx, s, want[0].Key)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []json.RawMessage{json.RawMessage(`{"a":1}`), json.RawMessage(`"two"`)}) {
		t.Fatalf("block 0 items = %q", got)
	}
	if _, err := ReadBlock(ctx, s, "jobs/x/items/missing.ndjson"); !errors.Is(err, job.ErrNotFound) {
		t.Fatalf("missing block: err = %v, want ErrNotFound", err)
	}
}

func TestWriteBlocksErrors(t *testing.T) {
	t.Parallel()
	good := []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`)}
	tests := []struct {
		name    string
		prefix  string
		items   []json.RawMessage
		per     int
		wantMsg string
	}{
		{name: "per zero", prefix: "p", items: good, per: 0, wantMsg: "per block 0"},
		{name: "empty prefix", prefix: "", items: good, per: 1, wantMsg: "empty prefix"},
		{name: "invalid item", prefix: "p", items: []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`2`), json.RawMessage(`{"a":`)}, per: 1, wantMsg: "item 2"},
		{name: "empty item", prefix: "p", items: []json.RawMessage{json.RawMessage(``), json.RawMessage(`2`)}, per: 1, wantMsg: "item 0"},
		{name: "two values", prefix: "p", items: []json.RawMessage{json.RawMessage(`1 2`)}, per: 5, wantMsg: "item 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			s := newMemStore()
			_, err := WriteBlocks(context.Background(), s, tt.prefix, tt.items, tt.per)
			if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), tt.wantMsg) {
				t.Fatalf("err = %v, want ErrInvalid mentioning %q", err, tt.wantMsg)
			}
			if objs, _ := s.List(context.Background(), ""); len(objs) != 0 {
				t.Fatalf("%d objects written despite the error", len(objs))
			}
		})
	}
}

func TestReadBlockInvalid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newMemStore()
	if err := s.Put(ctx, "b/1.ndjson", strings.NewReader("1\r\n\n{\"a\":2}\nnot json\n")); err != nil {
		t.Fatal(err)
	}
	_, err := ReadBlock(ctx, s, "b/1.ndjson")
	if !errors.Is(err, job.ErrInvalid) || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("err = %v, want ErrInvalid at line 4", err)
	}
}

func TestReadBlockTolerant(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newMemStore()
	if err := s.Put(ctx, "b/1.ndjson", strings.NewReader("1\r\n\n{\"a\":2}")); err != nil {
		t.Fatal(err)
	}
	got, err := ReadBlock(ctx, s, "b/1.ndjson")
	if err != nil {
		t.Fatal(err)
	}
	if want := []json.RawMessage{json.RawMessage(`1`), json.RawMessage(`{"a":2}`)}; !reflect.DeepEqual(got, want) {
		t.Fatalf("items = %q, want %q", got, want)
	}
}
