// Package s3blob is the blob.Store adapter on Amazon S3 (and S3-compatible
// emulators). One Store addresses one bucket; blob keys are object keys.
//
// Small objects (up to PartSize) are written with one PutObject from memory,
// larger ones with a multipart upload of PartSize parts, so a reader of any
// length can be stored without knowing its size. Both bodies are seekable,
// which lets SigV4 sign the payload over plain http (emulators) and lets the
// SDK rewind a body when it retries.
package s3blob

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/slicework/slicework/shared/blob"
	"github.com/slicework/slicework/shared/job"
)

// PartSize is the size of each multipart-upload part, and the largest object
// Put stores with a single PutObject.
const PartSize = 8 << 20

// abortTimeout bounds the AbortMultipartUpload issued after a failed upload,
// which runs even when the caller's context is already cancelled.
const abortTimeout = 30 * time.Second

// Store is a blob.Store on one S3 bucket. It is safe for concurrent use.
type Store struct {
	client *s3.Client
	bucket string
}

var _ blob.Store = (*Store)(nil)

// New returns a Store on bucket through client. It makes no call; the bucket
// must exist (see CreateBucket).
func New(client *s3.Client, bucket string) *Store {
	return &Store{client: client, bucket: bucket}
}

// Bucket returns the bucket the Store addresses.
func (s *Store) Bucket() string { return s.bucket }

// CreateBucket creates the bucket in the client's region. It is idempotent:
// a bucket the caller already owns is not an error. A BucketAlreadyExists
// answer is accepted only if the bucket is then reachable (HeadBucket), since
// S3 uses that code both for the caller's own bucket in us-east-1 and for a
// name taken by another account.
func (s *Store) CreateBucket(ctx context.Context) error {
	in := &s3.CreateBucketInput{Bucket: aws.String(s.bucket)}
	// us-east-1 takes no location constraint; every other region requires one.
	if region := s.client.Options().Region; region != "" && region != "us-east-1" {
		in.CreateBucketConfiguration = &types.CreateBucketConfiguration{
			LocationConstraint: types.BucketLocationConstraint(region),
		}
	}
	_, err := s.client.CreateBucket(ctx, in)
	var owned *types.BucketAlreadyOwnedByYou
	var exists *types.BucketAlreadyExists
	switch {
	case err == nil, errors.As(err, &owned):
		return nil
	case errors.As(err, &exists):
		if _, herr := s.client.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: aws.String(s.bucket)}); herr != nil {
			return fmt.Errorf("s3blob: create bucket %s: %w (head: %v)", s.bucket, err, herr)
		}
		return nil
	default:
		return fmt.Errorf("s3blob: create bucket %s: %w", s.bucket, err)
	}
}

// Put implements blob.Store. It reads up to PartSize bytes into memory; if r
// ends there it issues one PutObject, otherwise a multipart upload of PartSize
// parts that is aborted on any error (including cancellation of ctx). S3 makes
// the object visible only once the upload completes, so readers never see a
// partial object. If a retried CompleteMultipartUpload answers NoSuchUpload
// because its first attempt succeeded unseen, Put checks the object's ETag
// and succeeds.
func (s *Store) Put(ctx context.Context, key string, r io.Reader) error {
	if err := blob.ValidKey(key); err != nil {
		return fmt.Errorf("s3blob: put: %w", err)
	}
	r = blob.ContextReader(ctx, r)
	// One byte more than a part tells a PartSize object from a larger one.
	first, err := io.ReadAll(io.LimitReader(r, PartSize+1))
	if err != nil {
		return fmt.Errorf("s3blob: put %s: read: %w", key, err)
	}
	if len(first) <= PartSize {
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket:        aws.String(s.bucket),
			Key:           aws.String(key),
			Body:          bytes.NewReader(first),
			ContentLength: aws.Int64(int64(len(first))),
		})
		if err != nil {
			return fmt.Errorf("s3blob: put %s: %w", key, mapErr(err))
		}
		return nil
	}
	return s.putMultipart(ctx, key, io.MultiReader(bytes.NewReader(first), r))
}

func (s *Store) putMultipart(ctx context.Context, key string, r io.Reader) (err error) {
	created, err := s.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(key),
	})
	if err != nil {
		return fmt.Errorf("s3blob: put %s: create multipart upload: %w", key, mapErr(err))
	}
	uploadID := created.UploadId
	defer func() {
		if err == nil {
			return
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
		defer cancel()
		_, aerr := s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{
			Bucket:   aws.String(s.bucket),
			Key:      aws.String(key),
			UploadId: uploadID,
		})
		if aerr != nil && code(aerr) != "NoSuchUpload" { // NoSuchUpload: already gone
			err = fmt.Errorf("%w (abort multipart upload: %v)", err, aerr)
		}
	}()

	buf := make([]byte, PartSize)
	var parts []types.CompletedPart
	for num := int32(1); ; num++ {
		n, rerr := io.ReadFull(r, buf)
		if rerr != nil && rerr != io.EOF && rerr != io.ErrUnexpectedEOF {
			return fmt.Errorf("s3blob: put %s: read part %d: %w", key, num, rerr)
		}
		if n > 0 {
			out, err := s.client.UploadPart(ctx, &s3.UploadPartInput{
				Bucket:        aws.String(s.bucket),
				Key:           aws.String(key),
				UploadId:      uploadID,
				PartNumber:    aws.Int32(num),
				Body:          bytes.NewReader(buf[:n]),
				ContentLength: aws.Int64(int64(n)),
			})
			if err != nil {
				return fmt.Errorf("s3blob: put %s: upload part %d: %w", key, num, mapErr(err))
			}
			parts = append(parts, types.CompletedPart{ETag: out.ETag, PartNumber: aws.Int32(num)})
		}
		if rerr != nil { // the reader ended within or right after this part
			break
		}
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("s3blob: put %s: %w", key, err)
	}
	_, err = s.client.CompleteMultipartUpload(ctx, &s3.CompleteMultipartUploadInput{
		Bucket:          aws.String(s.bucket),
		Key:             aws.String(key),
		UploadId:        uploadID,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil && code(err) == "NoSuchUpload" && s.completed(ctx, key, parts) {
		// The SDK retried a Complete whose first answer was lost, and the
		// upload it completed is gone: the object is ours.
		err = nil
	}
	if err != nil {
		return fmt.Errorf("s3blob: put %s: complete multipart upload: %w", key, mapErr(err))
	}
	return nil
}

// completed reports whether key holds the object that completing a multipart
// upload of parts makes: S3 gives it the ETag md5(part MD5s)-count. (Parts
// whose ETags are not MD5s, as with SSE-KMS, never match; the caller then
// reports the error it has.)
func (s *Store) completed(ctx context.Context, key string, parts []types.CompletedPart) bool {
	h := md5.New()
	for _, p := range parts {
		sum, err := hex.DecodeString(strings.Trim(aws.ToString(p.ETag), `"`))
		if err != nil || len(sum) != md5.Size {
			return false
		}
		h.Write(sum)
	}
	want := fmt.Sprintf("%x-%d", h.Sum(nil), len(parts))
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	return err == nil && strings.Trim(aws.ToString(out.ETag), `"`) == want
}

// Get implements blob.Store.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if err := blob.ValidKey(key); err != nil {
		return nil, fmt.Errorf("s3blob: get: %w", err)
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return nil, fmt.Errorf("s3blob: get %s: %w", key, mapErr(err))
	}
	return out.Body, nil
}

// GetRange implements blob.Store with an HTTP Range request. A zero length
// yields an empty reader without any call; an offset at or past the end,
// which S3 answers with 416 InvalidRange, yields an empty reader. A server
// that ignores the Range header and answers 200 with the whole object (HTTP
// permits it) is handled by skipping to off and cutting at length.
func (s *Store) GetRange(ctx context.Context, key string, off, length int64) (io.ReadCloser, error) {
	if err := blob.ValidKey(key); err != nil {
		return nil, fmt.Errorf("s3blob: get %s: %w", key, err)
	}
	if off < 0 || length < 0 {
		return nil, fmt.Errorf("s3blob: get %s: range %d+%d: %w", key, off, length, job.ErrInvalid)
	}
	if length == 0 {
		return io.NopCloser(strings.NewReader("")), nil
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{
		Bucket: aws.String(s.bucket),
		Key:    aws.String(key),
		Range:  aws.String(fmt.Sprintf("bytes=%d-%d", off, off+length-1)),
	})
	if err != nil {
		if code(err) == "InvalidRange" || status(err) == http.StatusRequestedRangeNotSatisfiable {
			return io.NopCloser(strings.NewReader("")), nil
		}
		return nil, fmt.Errorf("s3blob: get %s range %d+%d: %w", key, off, length, mapErr(err))
	}
	if !partial(out) {
		// A 200 with the whole object: the server ignored the range.
		if _, err := io.CopyN(io.Discard, out.Body, off); err != nil && err != io.EOF {
			out.Body.Close()
			return nil, fmt.Errorf("s3blob: get %s range %d+%d: skip: %w", key, off, length, err)
		}
	}
	return struct {
		io.Reader
		io.Closer
	}{io.LimitReader(out.Body, length), out.Body}, nil
}

// partial reports whether a GetObject answer is a 206 range, not the whole
// object.
func partial(out *s3.GetObjectOutput) bool {
	if raw, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response); ok {
		return raw.StatusCode == http.StatusPartialContent
	}
	return aws.ToString(out.ContentRange) != ""
}

// Head implements blob.Store. HEAD answers carry no error code, so a key in
// a missing bucket is reported as job.ErrNotFound too.
func (s *Store) Head(ctx context.Context, key string) (blob.Info, error) {
	if err := blob.ValidKey(key); err != nil {
		return blob.Info{}, fmt.Errorf("s3blob: head: %w", err)
	}
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		return blob.Info{}, fmt.Errorf("s3blob: head %s: %w", key, mapErr(err))
	}
	return blob.Info{Key: key, Size: aws.ToInt64(out.ContentLength), Modified: aws.ToTime(out.LastModified)}, nil
}

// List implements blob.Store, paging through ListObjectsV2. S3 lists keys in
// UTF-8 binary order, which is Go's string order; the result is sorted all
// the same, so an emulator that pages differently cannot break the contract.
func (s *Store) List(ctx context.Context, prefix string) ([]blob.Info, error) {
	var out []blob.Info
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.bucket),
		Prefix: aws.String(prefix),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, fmt.Errorf("s3blob: list %q: %w", prefix, mapErr(err))
		}
		for _, o := range page.Contents {
			out = append(out, blob.Info{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)})
		}
	}
	slices.SortFunc(out, func(a, b blob.Info) int { return strings.Compare(a.Key, b.Key) })
	return out, nil
}

// Delete implements blob.Store. S3 answers 204 whether or not the object
// existed; a not-found answer is also accepted.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := blob.ValidKey(key); err != nil {
		return fmt.Errorf("s3blob: delete: %w", err)
	}
	_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)})
	if err != nil {
		if err = mapErr(err); errors.Is(err, job.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("s3blob: delete %s: %w", key, err)
	}
	return nil
}

// notFound wraps an S3 error so that it matches job.ErrNotFound as well as
// the original error.
type notFound struct{ err error }

func (e notFound) Error() string   { return e.err.Error() }
func (e notFound) Unwrap() []error { return []error{e.err, job.ErrNotFound} }

// mapErr makes a missing object (NoSuchKey, or NotFound / 404 from a HEAD,
// which has no body) match job.ErrNotFound. A missing bucket is left as it
// is: it is a configuration error, not a missing blob.
func mapErr(err error) error {
	switch code(err) {
	case "NoSuchKey", "NotFound":
		return notFound{err}
	case "NoSuchBucket":
		return err
	}
	if status(err) == http.StatusNotFound {
		return notFound{err}
	}
	return err
}

func code(err error) string {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode()
	}
	return ""
}

func status(err error) int {
	var re *awshttp.ResponseError
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}
