package awsmetrics

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	ddbtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func TestEstimatedReads(t *testing.T) {
	t.Parallel()
	key := map[string]ddbtypes.AttributeValue{"PK": &ddbtypes.AttributeValueMemberS{Value: "x"}}
	for _, tc := range []struct {
		name   string
		params any
		want   float64
		ok     bool
	}{
		{"batch get, consistent and eventual", &dynamodb.BatchGetItemInput{RequestItems: map[string]ddbtypes.KeysAndAttributes{
			"a": {Keys: []map[string]ddbtypes.AttributeValue{key, key, key}, ConsistentRead: aws.Bool(true)},
			"b": {Keys: []map[string]ddbtypes.AttributeValue{key}},
		}}, 3.5, true},
		{"transact get", &dynamodb.TransactGetItemsInput{TransactItems: make([]ddbtypes.TransactGetItem, 3)}, 6, true},
		{"get item reports its own", &dynamodb.GetItemInput{}, 0, false},
	} {
		got, ok := estimatedReads(tc.params)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s: estimatedReads = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}
