package main

import (
	"errors"
	"fmt"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"
)

// JobTableProps configures NewJobTable.
type JobTableProps struct {
	// Schema is the table's key schema, indexes and TTL attribute.
	Schema TableSchema
	// Protect turns on deletion protection and keeps the table when the
	// stack is deleted; otherwise the table goes with the stack.
	Protect bool
}

// NewJobTable creates the single table of jobs, chunk outcomes, unique keys
// and dependency edges: on-demand billing (no capacity to plan, and a
// 10,000-chunk job's bursts are absorbed), point-in-time recovery, the
// schema's TTL attribute and sparse GSIs. It uses AWS::DynamoDB::Table (not
// a global table), which the AWS-API emulators also support. It fails if the
// schema is malformed.
func NewJobTable(scope constructs.Construct, id string, p JobTableProps) (awsdynamodb.Table, error) {
	if err := p.Schema.validate(); err != nil {
		return nil, fmt.Errorf("job table: %w", err)
	}
	removal := awscdk.RemovalPolicy_DESTROY
	if p.Protect {
		removal = awscdk.RemovalPolicy_RETAIN
	}
	props := &awsdynamodb.TableProps{
		PartitionKey: p.Schema.PartitionKey.attribute(),
		BillingMode:  awsdynamodb.BillingMode_PAY_PER_REQUEST,
		PointInTimeRecoverySpecification: &awsdynamodb.PointInTimeRecoverySpecification{
			PointInTimeRecoveryEnabled: jsii.Bool(true),
		},
		DeletionProtection: jsii.Bool(p.Protect),
		RemovalPolicy:      removal,
	}
	if p.Schema.SortKey.Name != "" {
		props.SortKey = p.Schema.SortKey.attribute()
	}
	if p.Schema.TTLAttribute != "" {
		props.TimeToLiveAttribute = jsii.String(p.Schema.TTLAttribute)
	}
	t := awsdynamodb.NewTable(scope, jsii.String(id), props)
	for _, ix := range p.Schema.Indexes {
		gsi := &awsdynamodb.GlobalSecondaryIndexProps{
			IndexName:      jsii.String(ix.Name),
			PartitionKey:   ix.PartitionKey.attribute(),
			ProjectionType: awsdynamodb.ProjectionType(ix.Projection),
		}
		if ix.SortKey.Name != "" {
			gsi.SortKey = ix.SortKey.attribute()
		}
		if len(ix.NonKeyAttributes) > 0 {
			gsi.NonKeyAttributes = jsii.Strings(ix.NonKeyAttributes...)
		}
		t.AddGlobalSecondaryIndex(gsi)
	}
	return t, nil
}

// attributeTypes maps DynamoDB's type letters to the CDK's names.
var attributeTypes = map[string]awsdynamodb.AttributeType{
	"S": awsdynamodb.AttributeType_STRING,
	"N": awsdynamodb.AttributeType_NUMBER,
	"B": awsdynamodb.AttributeType_BINARY,
}

func (a KeyAttribute) attribute() *awsdynamodb.Attribute {
	return &awsdynamodb.Attribute{Name: jsii.String(a.Name), Type: attributeTypes[a.Type]}
}

func (a KeyAttribute) validate(what string) error {
	if a.Name == "" {
		return fmt.Errorf("%s: no attribute name", what)
	}
	if _, ok := attributeTypes[a.Type]; ok {
		return nil
	}
	return fmt.Errorf("%s %s: type %q: want S, N or B", what, a.Name, a.Type)
}

// validate checks what CloudFormation would reject, before a deploy does.
func (s TableSchema) validate() error {
	var errs []error
	if err := s.PartitionKey.validate("partition key"); err != nil {
		errs = append(errs, err)
	}
	if s.SortKey.Name != "" {
		if err := s.SortKey.validate("sort key"); err != nil {
			errs = append(errs, err)
		}
	}
	if len(s.Indexes) > 20 {
		errs = append(errs, fmt.Errorf("%d indexes: DynamoDB allows 20", len(s.Indexes)))
	}
	seen := map[string]bool{}
	for _, ix := range s.Indexes {
		what := "index " + ix.Name
		if ix.Name == "" || seen[ix.Name] {
			errs = append(errs, fmt.Errorf("index %q: empty or duplicate name", ix.Name))
		}
		seen[ix.Name] = true
		if err := ix.PartitionKey.validate(what + " partition key"); err != nil {
			errs = append(errs, err)
		}
		if ix.SortKey.Name != "" {
			if err := ix.SortKey.validate(what + " sort key"); err != nil {
				errs = append(errs, err)
			}
		}
		switch {
		case ix.Projection == "INCLUDE" && len(ix.NonKeyAttributes) == 0:
			errs = append(errs, fmt.Errorf("%s: INCLUDE projection without non-key attributes", what))
		case ix.Projection != "INCLUDE" && len(ix.NonKeyAttributes) > 0:
			errs = append(errs, fmt.Errorf("%s: non-key attributes need the INCLUDE projection", what))
		case ix.Projection != "ALL" && ix.Projection != "KEYS_ONLY" && ix.Projection != "INCLUDE":
			errs = append(errs, fmt.Errorf("%s: projection %q: want ALL, KEYS_ONLY or INCLUDE", what, ix.Projection))
		}
	}
	return errors.Join(errs...)
}
