package keycount

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
)

// Record is one line of the generated corpus.
type Record struct {
	ID     int64   `json:"id"`
	Key    string  `json:"key"`
	Region string  `json:"region"`
	Amount float64 `json:"amount"`
	Note   string  `json:"note,omitempty"`
}

var regions = []string{"eu-west", "us-east", "ap-south", "sa-east"}

// GenerateCorpus writes n NDJSON records to w, reproducibly from seed: the
// same n and seed always give the same bytes. Keys follow a Zipf
// distribution over 1,000 customers (a few hot keys, a long tail) and
// amounts are whole cents, so sums are exact in float64. It returns the
// expected aggregate per key, for checking a job's result.
func GenerateCorpus(w io.Writer, n int64, seed uint64) (map[string]Agg, error) {
	rng := rand.New(rand.NewPCG(seed, seed^0x5eed))
	zipf := rand.NewZipf(rng, 1.2, 1, 999)
	bw := bufio.NewWriterSize(w, 1<<16)
	want := map[string]Agg{}
	buf := make([]byte, 0, 256)
	for i := int64(1); i <= n; i++ {
		key := fmt.Sprintf("customer-%04d", zipf.Uint64())
		cents := rng.Int64N(100_000)
		buf = buf[:0]
		buf = append(buf, `{"id":`...)
		buf = strconv.AppendInt(buf, i, 10)
		buf = append(buf, `,"key":"`...)
		buf = append(buf, key...)
		buf = append(buf, `","region":"`...)
		buf = append(buf, regions[rng.IntN(len(regions))]...)
		buf = append(buf, `","amount":`...)
		buf = strconv.AppendFloat(buf, float64(cents)/100, 'f', 2, 64)
		if rng.IntN(10) == 0 {
			buf = append(buf, `,"note":"line with \"quotes\", commas and unicode: ü"`...)
		}
		buf = append(buf, "}\n"...)
		if _, err := bw.Write(buf); err != nil {
			return nil, fmt.Errorf("keycount: write corpus: %w", err)
		}
		a := want[key]
		a.Count++
		a.Sum += float64(cents) / 100
		want[key] = a
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("keycount: write corpus: %w", err)
	}
	return want, nil
}
