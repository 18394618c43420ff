package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/slicework/slicework/shared/job"
)

// apiClient calls the deployed HTTP API, signing requests with SigV4 for
// the execute-api service as any IAM-authorized client would.
type apiClient struct {
	base   *url.URL
	cfg    aws.Config
	http   *http.Client
	signer *v4.Signer
}

// newAPIClient returns a client of the API at apiURL. Emulators give APIs
// host names under execute-api that no DNS resolves; the client connects to
// the emulator's endpoint for them and keeps the Host header, which is how
// the emulator routes the request to the API.
func newAPIClient(cfg aws.Config, apiURL, endpoint string) (*apiClient, error) {
	base, err := url.Parse(strings.TrimSuffix(apiURL, "/"))
	if err != nil {
		return nil, fmt.Errorf("api url %q: %w", apiURL, err)
	}
	ep, err := url.Parse(endpoint)
	if err != nil {
		return nil, fmt.Errorf("endpoint %q: %w", endpoint, err)
	}
	emulatorAddr := ep.Host
	if ep.Port() == "" {
		emulatorAddr = net.JoinHostPort(ep.Hostname(), map[string]string{"https": "443"}[ep.Scheme]+map[string]string{"http": "80"}[ep.Scheme])
	}
	dialer := &net.Dialer{Timeout: 10 * time.Second}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if strings.Contains(addr, ".execute-api.") {
			addr = emulatorAddr
		}
		return dialer.DialContext(ctx, network, addr)
	}
	return &apiClient{base: base, cfg: cfg, http: &http.Client{Transport: tr, Timeout: 60 * time.Second}, signer: v4.NewSigner()}, nil
}

// do sends one request; signed says whether to sign it. It returns the
// status and the body.
func (c *apiClient) do(ctx context.Context, method, path string, body any, signed bool) (int, []byte, error) {
	var payload []byte
	if body != nil {
		var err error
		if payload, err = json.Marshal(body); err != nil {
			return 0, nil, err
		}
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, bytes.NewReader(payload))
	if err != nil {
		return 0, nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if signed {
		creds, err := c.cfg.Credentials.Retrieve(ctx)
		if err != nil {
			return 0, nil, fmt.Errorf("api: credentials: %w", err)
		}
		sum := sha256.Sum256(payload)
		if err := c.signer.SignHTTP(ctx, creds, req, hex.EncodeToString(sum[:]), "execute-api", c.cfg.Region, time.Now()); err != nil {
			return 0, nil, fmt.Errorf("api: sign: %w", err)
		}
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("api: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, nil, fmt.Errorf("api: %s %s: %w", method, path, err)
	}
	return resp.StatusCode, data, nil
}

// call sends a signed request and decodes a 2xx answer into out.
func (c *apiClient) call(ctx context.Context, method, path string, body, out any) error {
	code, data, err := c.do(ctx, method, path, body, true)
	if err != nil {
		return err
	}
	if code/100 != 2 {
		return fmt.Errorf("api: %s %s: status %d: %s", method, path, code, bytes.TrimSpace(data))
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("api: %s %s: %w", method, path, err)
	}
	return nil
}

func (c *apiClient) submit(ctx context.Context, req any) (*job.Job, error) {
	var j job.Job
	if err := c.call(ctx, http.MethodPost, "/jobs", req, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

func (c *apiClient) get(ctx context.Context, id string) (*job.Job, error) {
	var j job.Job
	if err := c.call(ctx, http.MethodGet, "/jobs/"+url.PathEscape(id), nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// wait polls job id until it is terminal, printing its progress when it
// changes.
func (c *apiClient) wait(ctx context.Context, id string, timeout time.Duration) (*job.Job, error) {
	start := time.Now()
	last := ""
	for {
		j, err := c.get(ctx, id)
		if err != nil {
			return nil, err
		}
		c := j.Counters
		line := fmt.Sprintf("%s: %d/%d chunks done, %d failed, %d retries", j.State, c.ChunksDone, c.ChunksTotal, c.ChunksFailed, c.Retries)
		if line != last {
			step("  %5.1fs job %s %s", time.Since(start).Seconds(), id, line)
			last = line
		}
		if j.State.Terminal() {
			return j, nil
		}
		if time.Since(start) > timeout {
			return nil, fmt.Errorf("job %s still %s after %s", id, j.State, timeout)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(time.Second):
		}
	}
}
