package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/job"
)

// progressLine renders one line of a job's progress: a bar, counts, rate and ETA.
func progressLine(j *job.Job, p engine.Progress, width int) string {
	filled := int(p.Percent / 100 * float64(width))
	filled = max(0, min(filled, width))
	bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
	total := fmt.Sprint(p.ChunksTotal)
	if !p.Sliced {
		total += "+"
	}
	eta := "-"
	if p.ETA > 0 {
		eta = p.ETA.Round(100 * time.Millisecond).String()
	}
	return fmt.Sprintf("%s %5.1f%% %-9s chunks %d/%s failed %d retries %d  items %d  %.0f items/s  eta %s",
		bar, p.Percent, j.State, p.ChunksDone+p.ChunksFailed, total, p.ChunksFailed, p.Retries, p.ItemsDone, p.ItemsPerSec, eta)
}

// progressPrinter draws progress in place on a terminal, or as a line every
// few seconds (and on every state change) when output is a log or pipe.
type progressPrinter struct {
	w         io.Writer
	tty       bool
	last      time.Time
	lastState job.State
	lastLen   int
}

func (pp *progressPrinter) update(j *job.Job, p engine.Progress, now time.Time) {
	line := progressLine(j, p, 30)
	if pp.tty {
		pad := ""
		if n := len([]rune(line)); n < pp.lastLen {
			pad = strings.Repeat(" ", pp.lastLen-n)
		}
		fmt.Fprintf(pp.w, "\r%s%s", line, pad)
		pp.lastLen = len([]rune(line))
		return
	}
	if j.State != pp.lastState || now.Sub(pp.last) >= 2*time.Second || j.State.Terminal() {
		fmt.Fprintln(pp.w, line)
		pp.last, pp.lastState = now, j.State
	}
}

func (pp *progressPrinter) done() {
	if pp.tty {
		fmt.Fprintln(pp.w)
	}
}
