package cli

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/spf13/cobra"

	"github.com/slicework/slicework/shared/awsconfig"
	"github.com/slicework/slicework/shared/awsmetrics"
	"github.com/slicework/slicework/shared/backend"
	"github.com/slicework/slicework/shared/backend/awsbackend"
	"github.com/slicework/slicework/shared/backend/embedded"
	"github.com/slicework/slicework/shared/emulator"
	"github.com/slicework/slicework/shared/store"
	"github.com/slicework/slicework/shared/store/dynamostore"
)

// backendFlags choose and configure the backend of a command.
type backendFlags struct {
	backend     string
	data        string
	emulator    string
	endpoint    string
	region      string
	table       string
	bucket      string
	queuePrefix string
	create      bool
	// httpClient, when set (tests), carries every AWS request.
	httpClient *http.Client
}

func (f *backendFlags) register(c *cobra.Command) {
	fl := c.Flags()
	fl.StringVar(&f.backend, "backend", "embedded", "embedded (a local data directory) or aws (DynamoDB, SQS and S3 through the SDK's standard configuration)")
	fl.StringVar(&f.data, "data", ".data", "embedded backend: data directory")
	fl.StringVar(&f.emulator, "emulator", "", "aws backend: start this AWS-API emulator (ministack or moto) from the project's virtualenv and use it")
	fl.StringVar(&f.endpoint, "endpoint", "", "aws backend: endpoint of every AWS service, e.g. an emulator (default: AWS_ENDPOINT_URL, else AWS)")
	fl.StringVar(&f.region, "region", "", "aws backend: region (default: the SDK's chain; us-east-1 on an emulator)")
	fl.StringVar(&f.table, "table", "slicework-local", "aws backend: DynamoDB table")
	fl.StringVar(&f.bucket, "bucket", "slicework-local", "aws backend: S3 bucket")
	fl.StringVar(&f.queuePrefix, "queue-prefix", "slicework-local-", "aws backend: prefix of the SQS queue names")
	fl.BoolVar(&f.create, "create", false, "aws backend: create the table and bucket if missing (always on with --emulator or an endpoint)")
}

// opened is a backend and what was started for it.
type opened struct {
	be *backend.Backend
	// metrics counts AWS requests (aws backend only).
	metrics *awsmetrics.Counter
	// view reads job state for progress displays; on the aws backend its
	// requests are not counted in metrics, which price the job alone.
	view store.Store
	// where describes the backend for humans.
	where string
	stop  []func() error
}

func (o *opened) close() {
	if o.be != nil {
		o.be.Close()
	}
	for i := len(o.stop) - 1; i >= 0; i-- {
		o.stop[i]()
	}
}

// open opens the chosen backend; progress lines go to w.
func (f *backendFlags) open(ctx context.Context, w io.Writer) (*opened, error) {
	switch f.backend {
	case "embedded":
		if f.emulator != "" || f.endpoint != "" {
			return nil, fmt.Errorf("--emulator and --endpoint need --backend aws")
		}
		be, err := embedded.Open(f.data, nil)
		if err != nil {
			return nil, err
		}
		return &opened{be: be, view: be.Store, where: "embedded, data " + f.data}, nil
	case "aws":
		return f.openAWS(ctx, w)
	default:
		return nil, fmt.Errorf("--backend %q: want embedded or aws", f.backend)
	}
}

func (f *backendFlags) openAWS(ctx context.Context, w io.Writer) (*opened, error) {
	o := &opened{}
	endpoint := f.endpoint
	if f.emulator != "" {
		if endpoint != "" {
			return nil, fmt.Errorf("--emulator and --endpoint exclude each other")
		}
		start := time.Now()
		p, err := emulator.Start(emulator.Kind(f.emulator))
		if err != nil {
			return nil, err
		}
		o.stop = append(o.stop, p.Stop)
		endpoint = p.Endpoint
		fmt.Fprintf(w, "started %s at %s in %s (log %s)\n", f.emulator, endpoint, time.Since(start).Round(time.Millisecond), p.Log)
	}
	cfg, err := awsConfig(ctx, endpoint, f.region, f.httpClient)
	if err != nil {
		o.close()
		return nil, err
	}
	unmetered := cfg
	o.metrics = awsmetrics.New()
	o.metrics.Attach(&cfg)
	c := awsbackend.Config{Table: f.table, Bucket: f.bucket, QueuePrefix: f.queuePrefix}
	if f.create || endpoint != "" || os.Getenv("AWS_ENDPOINT_URL") != "" {
		if err := awsbackend.CreateResources(ctx, cfg, c); err != nil {
			o.close()
			return nil, err
		}
	}
	be, err := awsbackend.Open(cfg, c)
	if err != nil {
		o.close()
		return nil, err
	}
	o.be = be
	o.view = dynamostore.New(awsconfig.DynamoDB(unmetered), f.table)
	o.where = fmt.Sprintf("aws, table %s, bucket %s, queues %s*", f.table, f.bucket, f.queuePrefix)
	if endpoint != "" {
		o.where += ", endpoint " + endpoint
	}
	return o, nil
}

// awsConfig loads the SDK configuration: for an explicit endpoint, test
// credentials and every service at the endpoint; else the standard chain.
func awsConfig(ctx context.Context, endpoint, region string, client *http.Client) (aws.Config, error) {
	if endpoint != "" {
		if region == "" {
			region = emulator.Region
		}
		return awsconfig.ForEndpoint(ctx, endpoint, region, client)
	}
	cfg, err := awsconfig.Load(ctx)
	if err != nil {
		return aws.Config{}, err
	}
	if region != "" {
		cfg.Region = region
	}
	if client != nil {
		cfg.HTTPClient = client
	}
	return cfg, nil
}
