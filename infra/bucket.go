package main

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// JobDataPrefix is the key prefix of everything the engine writes per job
// (data blocks, chunk outputs, results): jobs/<id>/... (see
// engine.ResultKey).
const JobDataPrefix = "jobs/"

// DataBucketProps configures NewDataBucket.
type DataBucketProps struct {
	// JobDataDays is how long objects under jobs/ live.
	JobDataDays int
	// Protect keeps the bucket when the stack is deleted. Otherwise the
	// bucket is deleted with the stack, which CloudFormation can do only
	// when it is empty (see NewDataBucket).
	Protect bool
}

// NewDataBucket creates the bucket of job inputs, data blocks and results:
// all public access blocked, TLS 1.2 or later only, S3-managed encryption,
// no versioning (objects are written once per key by the engine, and the
// lifecycle rules would otherwise keep noncurrent copies), multipart uploads
// that were never completed aborted after a day, and job data expired after
// JobDataDays.
//
// autoDeleteObjects is deliberately not used, on any stage: it adds a
// custom-resource Lambda function (Node.js runtime, its own role allowed to
// delete every object) to every stack, for the sole benefit of
// `cdk destroy` on a non-empty bucket. Deleting an unprotected stage whose
// bucket still holds objects fails on the bucket; empty it first (README).
func NewDataBucket(scope constructs.Construct, id string, p DataBucketProps) awss3.Bucket {
	removal := awscdk.RemovalPolicy_DESTROY
	if p.Protect {
		removal = awscdk.RemovalPolicy_RETAIN
	}
	return awss3.NewBucket(scope, jsii.String(id), &awss3.BucketProps{
		BlockPublicAccess: awss3.BlockPublicAccess_BLOCK_ALL(),
		EnforceSSL:        jsii.Bool(true),
		MinimumTLSVersion: jsii.Number(1.2),
		Encryption:        awss3.BucketEncryption_S3_MANAGED,
		ObjectOwnership:   awss3.ObjectOwnership_BUCKET_OWNER_ENFORCED,
		Versioned:         jsii.Bool(false),
		RemovalPolicy:     removal,
		LifecycleRules: &[]*awss3.LifecycleRule{
			{
				Id:                                  jsii.String("abort-incomplete-multipart-uploads"),
				AbortIncompleteMultipartUploadAfter: awscdk.Duration_Days(jsii.Number(1)),
			},
			{
				Id:         jsii.String("expire-job-data"),
				Prefix:     jsii.String(JobDataPrefix),
				Expiration: awscdk.Duration_Days(jsii.Number(float64(p.JobDataDays))),
			},
		},
	})
}

// BlobAccess is what a function may do with the bucket's objects.
type BlobAccess struct {
	// Delete allows deleting objects (the engine deletes the data blocks of
	// a submission that failed; only submitters need it).
	Delete bool
}

// GrantBlobAccess allows grantee the S3 calls of the blob adapter
// (shared/blob/s3blob) on bucket, by name: GetObject (Get, GetRange,
// Head), PutObject and AbortMultipartUpload (Put, single or multipart),
// ListBucket (List; it also makes a missing key a 404 instead of a 403),
// and DeleteObject if access.Delete. Unlike bucket.GrantReadWrite it grants
// no action wildcard (s3:GetObject*, s3:List*, s3:Abort*, ...).
func GrantBlobAccess(grantee awsiam.IGrantable, bucket awss3.IBucket, access BlobAccess) {
	objectActions := []string{"s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload"}
	if access.Delete {
		objectActions = append(objectActions, "s3:DeleteObject")
	}
	awsiam.Grant_AddToPrincipal(&awsiam.GrantOnPrincipalOptions{
		Grantee:      grantee,
		Actions:      jsii.Strings("s3:ListBucket"),
		ResourceArns: jsii.Strings(*bucket.BucketArn()),
	})
	awsiam.Grant_AddToPrincipal(&awsiam.GrantOnPrincipalOptions{
		Grantee: grantee,
		Actions: jsii.Strings(objectActions...),
		// Wildcard resource, justified: every object of this one bucket.
		// Job inputs are uploaded under keys the user chooses, so the
		// functions cannot be limited to jobs/.
		ResourceArns: jsii.Strings(*bucket.ArnForObjects(jsii.String("*"))),
	})
}
