// Package emulator starts AWS-API emulators (MiniStack and moto server) for
// tests, from the project's Python virtualenv, on free loopback ports. Each
// emulator starts once per test binary and is stopped when the binary ends.
//
// Tests that need an emulator call Endpoint or Config. They skip, with a
// message, only when python3 is absent; under CI (CI set) they fail instead.
// The virtualenv is .venv at the repository root (or $SLICEWORK_VENV); it is
// created from localstack/requirements.txt when missing.
package emulator

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/slicework/slicework/shared/awsconfig"
)

// Kind names an emulator.
type Kind string

// The emulators the AWS adapters are tested against.
const (
	MiniStack Kind = "ministack"
	Moto      Kind = "moto"
)

// Kinds lists every emulator, for table tests.
var Kinds = []Kind{MiniStack, Moto}

// Region is the region tests use.
const Region = "us-east-1"

type instance struct {
	once     sync.Once
	endpoint string
	err      error
	cmd      *exec.Cmd
	log      string
}

var (
	mu        sync.Mutex
	instances = map[Kind]*instance{}
)

// Endpoint returns the base URL of a running emulator of kind k, starting it
// on first use.
func Endpoint(t testing.TB, k Kind) string {
	t.Helper()
	mu.Lock()
	in, ok := instances[k]
	if !ok {
		in = &instance{}
		instances[k] = in
	}
	mu.Unlock()
	in.once.Do(func() { in.endpoint, in.err = in.start(k) })
	if in.err != nil {
		if errors.Is(in.err, ErrNoPython) && os.Getenv("CI") == "" {
			t.Skipf("emulator %s: %v", k, in.err)
		}
		t.Fatalf("emulator %s: %v", k, in.err)
	}
	return in.endpoint
}

// Config returns an AWS configuration for emulator k: static credentials,
// region Region, every service at the emulator. client may be nil.
func Config(t testing.TB, k Kind, client *http.Client) aws.Config {
	t.Helper()
	cfg, err := awsconfig.ForEndpoint(context.Background(), Endpoint(t, k), Region, client)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// Run runs the tests of m and then stops the emulators it started; use it
// from TestMain: os.Exit(emulator.Run(m)).
func Run(m *testing.M) int {
	code := m.Run()
	StopAll()
	return code
}

// StopAll stops every emulator this process started.
func StopAll() {
	mu.Lock()
	defer mu.Unlock()
	for _, in := range instances {
		if in.cmd != nil && in.cmd.Process != nil {
			_ = in.cmd.Process.Kill()
			_ = in.cmd.Wait()
		}
	}
}

// ErrNoPython means python3 is missing, so no emulator can start.
var ErrNoPython = errors.New("python3 is not installed; the AWS adapter tests need it to run the emulators")

func (in *instance) start(k Kind) (string, error) {
	p, err := Start(k)
	if err != nil {
		return "", err
	}
	in.cmd, in.log = p.cmd, p.Log
	return p.Endpoint, nil
}

// Process is an emulator started by Start.
type Process struct {
	// Endpoint is the emulator's base URL on a loopback port.
	Endpoint string
	// Log is the file that holds the emulator's output.
	Log string
	cmd *exec.Cmd
}

// Stop kills the emulator and waits for it to exit.
func (p *Process) Stop() error {
	if p.cmd == nil || p.cmd.Process == nil {
		return nil
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	return nil
}

// Start starts an emulator of kind k on a free loopback port, from the
// project's virtualenv (created when missing), and waits until it answers.
// The emulator is killed when the calling process dies; call Stop to end it
// sooner. Errors wrap ErrNoPython when python3 is absent.
func Start(k Kind) (*Process, error) {
	venv, err := ensureVenv()
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	endpoint := fmt.Sprintf("http://127.0.0.1:%d", port)
	var cmd *exec.Cmd
	var health string
	switch k {
	case MiniStack:
		cmd = exec.Command(filepath.Join(venv, "bin", "ministack"))
		cmd.Env = append(os.Environ(), fmt.Sprintf("GATEWAY_PORT=%d", port), "BIND_HOST=127.0.0.1", "MINISTACK_HOST=127.0.0.1",
			"IOT_MTLS_ENABLED=0", "SFTP_ENABLED=0", "LOG_LEVEL=WARNING", "MINISTACK_REGION="+Region)
		health = endpoint + "/_ministack/health"
	case Moto:
		cmd = exec.Command(filepath.Join(venv, "bin", "moto_server"), "-H", "127.0.0.1", "-p", fmt.Sprint(port))
		health = endpoint + "/moto-api/"
	default:
		return nil, fmt.Errorf("emulator: unknown kind %q (ministack, moto)", k)
	}
	logf, err := os.CreateTemp("", "slicework-"+string(k)+"-*.log")
	if err != nil {
		return nil, fmt.Errorf("emulator: %w", err)
	}
	defer logf.Close()
	p := &Process{Endpoint: endpoint, Log: logf.Name(), cmd: cmd}
	cmd.Stdout, cmd.Stderr = logf, logf
	// The emulator dies with its parent even if Stop never runs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("emulator: start %s: %w", cmd.Path, err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get(health)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p, nil
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = p.Stop()
	b, _ := os.ReadFile(p.Log)
	return nil, fmt.Errorf("emulator: %s did not become healthy at %s within 90s; log %s:\n%s", k, health, p.Log, tail(b, 3000))
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// RepoRoot returns the directory holding go.mod, searching up from the
// working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// ensureVenv returns the virtualenv, creating it from the pinned
// requirements when its stamp is missing or older than them. A file lock
// keeps concurrent test binaries from building it twice.
func ensureVenv() (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	venv := os.Getenv("SLICEWORK_VENV")
	if venv == "" {
		venv = filepath.Join(root, ".venv")
	}
	req := filepath.Join(root, "localstack", "requirements.txt")
	stamp := filepath.Join(venv, ".requirements")
	want, err := os.ReadFile(req)
	if err != nil {
		return "", err
	}
	if have, err := os.ReadFile(stamp); err == nil && string(have) == string(want) {
		return venv, nil
	}
	python, err := exec.LookPath("python3")
	if err != nil {
		return "", ErrNoPython
	}
	if err := os.MkdirAll(filepath.Dir(venv), 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(venv+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return "", err
	}
	defer syscall.Flock(int(lock.Fd()), syscall.LOCK_UN)
	if have, err := os.ReadFile(stamp); err == nil && string(have) == string(want) {
		return venv, nil // built by another process while we waited
	}
	for _, args := range [][]string{
		{python, "-m", "venv", venv},
		{filepath.Join(venv, "bin", "pip"), "install", "--quiet", "--disable-pip-version-check", "-r", req},
	} {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s: %v\n%s", strings.Join(args, " "), err, tail(out, 3000))
		}
	}
	if err := os.WriteFile(stamp, want, 0o644); err != nil {
		return "", err
	}
	return venv, nil
}
