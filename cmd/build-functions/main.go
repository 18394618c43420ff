// Command build-functions builds every Lambda function under functions/ for
// the provided.al2023 runtime: one static linux/arm64 `bootstrap` per
// function (CGO off, -tags lambda.norpc, stripped), zipped for deployment
// with a fixed timestamp so that unchanged code yields an unchanged asset.
// It prints each function's binary and zip size.
//
// Usage: go run ./cmd/build-functions [-out build] [-arch arm64] [function ...]
package main

import (
	"archive/zip"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"text/tabwriter"
	"time"
)

func main() {
	out := flag.String("out", "build", "output directory: <out>/<function>/bootstrap and <out>/<function>.zip")
	arch := flag.String("arch", "arm64", "GOARCH of the functions (the stack runs arm64)")
	flag.Parse()
	if err := run(*out, *arch, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "build-functions:", err)
		os.Exit(1)
	}
}

func run(out, arch string, only []string) error {
	mains, err := filepath.Glob("functions/*/main.go")
	if err != nil {
		return err
	}
	if len(mains) == 0 {
		return fmt.Errorf("no functions/*/main.go under %s: run from the repository root", mustWd())
	}
	var names, pkgs []string
	for _, m := range mains {
		name := filepath.Base(filepath.Dir(m))
		if len(only) == 0 || slices.Contains(only, name) {
			names = append(names, name)
			pkgs = append(pkgs, "./"+filepath.Dir(m))
		}
	}
	if len(names) == 0 {
		return fmt.Errorf("no function named %v under functions/", only)
	}
	// One go build for all functions shares the compile work.
	tmp, err := os.MkdirTemp("", "build-functions-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	args := append([]string{"build", "-trimpath", "-tags", "lambda.norpc", "-ldflags", "-s -w -buildid=", "-o", tmp + string(os.PathSeparator)}, pkgs...)
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("go build: %w", err)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "function\tbootstrap bytes\tzip bytes\t")
	for _, name := range names {
		bin := filepath.Join(out, name, "bootstrap")
		if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
			return err
		}
		if err := moveFile(filepath.Join(tmp, name), bin); err != nil {
			return err
		}
		zipPath := filepath.Join(out, name+".zip")
		if err := zipBootstrap(bin, zipPath); err != nil {
			return fmt.Errorf("zip %s: %w", name, err)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t\n", name, size(bin), size(zipPath))
	}
	return tw.Flush()
}

// moveFile renames src to dst, copying when they are on different file systems.
func moveFile(src, dst string) error {
	if err := os.Rename(src, dst); err == nil {
		return nil
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// zipBootstrap writes a zip holding bin as an executable file named
// bootstrap, with a fixed modification time.
func zipBootstrap(bin, dst string) error {
	src, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".zip-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	zw := zip.NewWriter(tmp)
	h := &zip.FileHeader{Name: "bootstrap", Method: zip.Deflate, Modified: time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)}
	h.SetMode(0o755)
	w, err := zw.CreateHeader(h)
	if err == nil {
		_, err = io.Copy(w, src)
	}
	if err == nil {
		err = zw.Close()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

func size(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return -1
	}
	return fi.Size()
}

func mustWd() string {
	wd, _ := os.Getwd()
	return wd
}
