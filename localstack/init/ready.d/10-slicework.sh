#!/bin/sh
# Ready hook (LocalStack and MiniStack run /etc/localstack/init/ready.d/*.sh
# once the emulator answers, with AWS_ENDPOINT_URL and test credentials set).
# It checks that every service the slicework stack uses answers, so that a
# missing or disabled service shows up here and not halfway through a
# deployment, then says what to run next.
set -u
failed=""
for probe in \
  "cloudformation list-stacks" "lambda list-functions" "sqs list-queues" "dynamodb list-tables" \
  "s3api list-buckets" "apigatewayv2 get-apis" "events list-rules" "logs describe-log-groups" \
  "cloudwatch describe-alarms" "sns list-topics" "kms list-keys" "iam list-roles" "ssm describe-parameters"
do
  # shellcheck disable=SC2086
  if ! aws --endpoint-url "${AWS_ENDPOINT_URL:-http://localhost:4566}" $probe >/dev/null 2>&1; then
    failed="$failed ${probe%% *}"
  fi
done
if [ -n "$failed" ]; then
  echo "slicework: these services did not answer:$failed; the stack needs them" >&2
  exit 1
fi
echo "slicework: every service the stack uses answers; run make local-deploy, then make local-e2e"
