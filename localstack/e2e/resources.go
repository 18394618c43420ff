package main

import (
	"context"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/service/cloudformation"
)

// resources are the deployed stack's resources by logical id.
type resources struct {
	stack    string
	physical map[string]string
	types    map[string]string
}

func newResources(ctx context.Context, cf *cloudformation.Client, stack string) (*resources, error) {
	out, err := cf.DescribeStackResources(ctx, &cloudformation.DescribeStackResourcesInput{StackName: &stack})
	if err != nil {
		return nil, fmt.Errorf("stack %s: %w", stack, err)
	}
	r := &resources{stack: stack, physical: map[string]string{}, types: map[string]string{}}
	for _, sr := range out.StackResources {
		if sr.LogicalResourceId == nil || sr.PhysicalResourceId == nil {
			continue
		}
		r.physical[*sr.LogicalResourceId] = *sr.PhysicalResourceId
		r.types[*sr.LogicalResourceId] = deref(sr.ResourceType)
	}
	if len(r.physical) == 0 {
		return nil, fmt.Errorf("stack %s has no resources", stack)
	}
	return r, nil
}

// ofType lists the logical ids of the resources of type t.
func (r *resources) ofType(t string) []string {
	var ids []string
	for id, typ := range r.types {
		if typ == t {
			ids = append(ids, id)
		}
	}
	return ids
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
