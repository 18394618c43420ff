// Package cli is the slicework command line: run a sample job end to end on
// the embedded backend with a live progress bar and a report, serve the
// local function host, generate the sample corpus, and upload inputs.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/slicework/slicework/shared/engine"
	"github.com/slicework/slicework/shared/events"
	"github.com/slicework/slicework/shared/host"
	"github.com/slicework/slicework/shared/job"
	"github.com/slicework/slicework/shared/kinds"
	"github.com/slicework/slicework/shared/kinds/keycount"
	"github.com/slicework/slicework/shared/schedule"
)

// NewRoot returns the root command. Output goes to stdout and stderr.
func NewRoot(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "slicework",
		Short:         "slicework runs chunked background jobs: locally on an embedded backend, or on AWS",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(runCmd(), serveCmd(), genCorpusCmd(), putCmd())
	return root
}

// Main runs the command line with args and returns the process exit code.
func Main(args []string) int {
	root := NewRoot(os.Stdout, os.Stderr)
	root.SetArgs(args)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "slicework:", err)
		if code, ok := err.(exitCode); ok {
			return int(code)
		}
		return 1
	}
	return 0
}

type exitCode int

func (c exitCode) Error() string { return fmt.Sprintf("exit status %d", int(c)) }

// hostFlags are the flags shared by run and serve.
type hostFlags struct {
	backendFlags
	workers    int
	visibility time.Duration
	sweep      time.Duration
	staleAfter time.Duration
	logFile    string
	budget     int64
	// schedules is the schedules file the host fires ("" for none);
	// schedulesSet says the user named it, so that a missing file is an error.
	schedules    string
	schedulesSet bool
}

func (f *hostFlags) register(c *cobra.Command) {
	f.backendFlags.register(c)
	c.Flags().IntVar(&f.workers, "workers", 4, "concurrent worker invocations per channel")
	c.Flags().DurationVar(&f.visibility, "visibility", 2*time.Minute, "visibility timeout of the queues (the chunk lease)")
	c.Flags().DurationVar(&f.sweep, "sweep-every", time.Minute, "period of the scheduler (sweeper)")
	c.Flags().DurationVar(&f.staleAfter, "stale-after", 5*time.Minute, "how long a job may sit queued or finishing before the sweeper re-drives it (its task was lost)")
	c.Flags().StringVar(&f.logFile, "log", "", "write the host's log to this file (default: stderr)")
	c.Flags().Int64Var(&f.budget, "slice-budget", 0, "most chunk tasks one slicer invocation sends; larger inputs are sliced recursively (0: the engine's 10,000)")
}

// loadSchedules reads the schedules the host fires: none when f names no
// file, or when the default file is missing.
func (f *hostFlags) loadSchedules(log *slog.Logger) ([]schedule.Definition, error) {
	if f.schedules == "" {
		return nil, nil
	}
	defs, err := schedule.Load(f.schedules)
	if errors.Is(err, fs.ErrNotExist) && !f.schedulesSet {
		log.Info("no schedules file; no recurring jobs", "file", f.schedules)
		return nil, nil
	}
	return defs, err
}

// stack is an opened backend, engine and host.
type stack struct {
	*opened
	eng  *engine.Engine
	host *host.Host
	// events carries the engine's completion events; subscribe to see them.
	events *events.Bus
	log    *slog.Logger
	logF   *os.File
}

func (s *stack) close() {
	s.opened.close()
	if s.logF != nil {
		s.logF.Close()
	}
}

func openStack(ctx context.Context, f hostFlags, addr string, stdout, stderr io.Writer, onTerminal func()) (*stack, error) {
	s := &stack{}
	var logW io.Writer = stderr
	if f.logFile != "" {
		if err := os.MkdirAll(filepath.Dir(f.logFile), 0o755); err != nil {
			return nil, err
		}
		lf, err := os.OpenFile(f.logFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, fmt.Errorf("open log: %w", err)
		}
		s.logF, logW = lf, lf
	}
	s.log = slog.New(slog.NewTextHandler(logW, &slog.HandlerOptions{Level: slog.LevelInfo}))
	o, err := f.open(ctx, stdout)
	if err != nil {
		if s.logF != nil {
			s.logF.Close()
		}
		return nil, err
	}
	s.opened = o
	be := o.be
	reg, err := kinds.Registry()
	if err != nil {
		return nil, err
	}
	cfg := engine.Config{Store: be.Store, Queue: be.Queue, Blobs: be.Blobs, Registry: reg, Logger: s.log, SliceBudget: f.budget, StaleAfter: f.staleAfter}
	if onTerminal != nil {
		cfg.OnTerminal = func(*job.Job) { onTerminal() }
	}
	// The local host's completion events go to an in-process bus.
	s.events = events.NewBus()
	s.events.Subscribe(func(e events.JobFinished) {
		s.log.Debug("completion event", "event", e.ID, "job", e.JobID, "kind", e.Kind, "state", e.State)
	})
	cfg.Events = s.events
	s.eng, err = engine.New(cfg)
	if err != nil {
		return nil, err
	}
	hc := host.Config{
		Engine: s.eng, Addr: addr, Workers: f.workers, Visibility: f.visibility,
		SchedulerEvery: f.sweep, Logger: s.log,
	}
	if hc.Schedules, err = f.loadSchedules(s.log); err != nil {
		s.close()
		return nil, err
	}
	if o.metrics != nil {
		// Poll SQS as Lambda's event source mapping does: 20 s long polls,
		// so an idle queue costs a request per poller every 20 s.
		hc.PollWait = 20 * time.Second
	}
	s.host, err = host.New(hc)
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func serveCmd() *cobra.Command {
	var f hostFlags
	var addr string
	c := &cobra.Command{
		Use:   "serve",
		Short: "Run the local function host: the API, the slicer, the workers and the scheduler",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f.schedulesSet = cmd.Flags().Changed("schedules")
			s, err := openStack(cmd.Context(), f, addr, cmd.OutOrStdout(), cmd.ErrOrStderr(), nil)
			if err != nil {
				return err
			}
			defer s.close()
			errc := make(chan error, 1)
			go func() { errc <- s.host.Run(cmd.Context()) }()
			select {
			case err := <-errc:
				return err
			case <-s.host.Ready():
			}
			fmt.Fprintf(cmd.OutOrStdout(), "slicework: listening on http://%s (%s, kinds %v)\n", s.host.Addr(), s.where, s.eng.Registry().Kinds())
			return <-errc
		},
	}
	f.register(c)
	c.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "API listen address")
	c.Flags().StringVar(&f.schedules, "schedules", schedule.DefaultFile, "schedules file whose recurring jobs the host fires (\"\" for none)")
	return c
}

func genCorpusCmd() *cobra.Command {
	var records int64
	var seed uint64
	var out string
	c := &cobra.Command{
		Use:   "gen-corpus",
		Short: "Write the sample NDJSON corpus (reproducible from --records and --seed)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if records < 1 {
				return fmt.Errorf("--records must be ≥ 1")
			}
			w := cmd.OutOrStdout()
			if out != "-" {
				fh, err := os.Create(out)
				if err != nil {
					return err
				}
				defer fh.Close()
				w = fh
			}
			_, err := keycount.GenerateCorpus(w, records, seed)
			return err
		},
	}
	c.Flags().Int64Var(&records, "records", 100_000, "number of records")
	c.Flags().Uint64Var(&seed, "seed", 1, "random seed")
	c.Flags().StringVar(&out, "out", "-", "output file (- for stdout)")
	return c
}

func putCmd() *cobra.Command {
	var f backendFlags
	c := &cobra.Command{
		Use:   "put FILE KEY",
		Short: "Upload a file to the backend's blob store (a directory, or S3), to use as a job input",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			o, err := f.open(cmd.Context(), cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			defer o.close()
			fh, err := os.Open(args[0])
			if err != nil {
				return err
			}
			defer fh.Close()
			if err := o.be.Blobs.Put(cmd.Context(), args[1], fh); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "stored %s as %s (%s)\n", args[0], args[1], o.where)
			return nil
		},
	}
	f.register(c)
	return c
}
