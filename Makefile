# slicework — `make run` runs the sample job locally; `make test` runs every test tier.
GO       ?= go
DATA     ?= .data
KIND     ?= keycount
RUN_ARGS ?=
# BACKEND=aws runs on DynamoDB, SQS and S3: against AWS_ENDPOINT_URL if set, else MiniStack started from the virtualenv.
BACKEND  ?= embedded
BUILD    ?= build
# STAGE names one copy of the stack; several live side by side in one account.
STAGE    ?= dev

VENV     ?= .venv
# LOCAL_STAGE is the stage that the local-* targets deploy to the emulator on 127.0.0.1:4566.
LOCAL_STAGE ?= local
# VENV_LINT holds cfn-lint and checkov (many dependencies), apart from the emulators.
VENV_LINT ?= .venv-lint

.PHONY: run serve build infra-deps infra-test synth deploy test vet fmt-check unit race bench corpus-sample clean help venv security venv-lint local-up local-deploy local-e2e local-down scale

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

AWS_RUN_FLAGS = --backend aws $(if $(AWS_ENDPOINT_URL),,--emulator ministack)

run: $(if $(filter aws,$(BACKEND)),venv) ## run sample job (a) end to end (KIND=recompute for job b; BACKEND=aws for DynamoDB/SQS/S3 on MiniStack)
	$(GO) run ./cmd/slicework run --data $(DATA) --kind $(KIND) $(if $(filter aws,$(BACKEND)),$(AWS_RUN_FLAGS)) $(RUN_ARGS)

build: ## build every Lambda function: $(BUILD)/<fn>/bootstrap and $(BUILD)/<fn>.zip (linux/arm64, static, stripped)
	$(GO) run ./cmd/build-functions -out $(BUILD)

serve: ## serve the local function host and the API on 127.0.0.1:8080
	$(GO) run ./cmd/slicework serve --data $(DATA)

test: fmt-check vet venv build unit scale infra-test security local-e2e ## every test tier (and the Lambda build)

venv: $(VENV)/.requirements ## Python virtualenv with the pinned AWS-API emulators (MiniStack, moto)

$(VENV)/.requirements: localstack/requirements.txt
	@command -v python3 >/dev/null || { echo "python3 not found: the emulator test tiers will be skipped"; exit 0; }; \
	python3 -m venv $(VENV) && $(VENV)/bin/pip install --quiet --disable-pip-version-check -r localstack/requirements.txt && \
	cp localstack/requirements.txt $@

infra-deps: infra/node_modules/.package-lock.json ## the pinned aws-cdk CLI (npm) for the CDK app

infra/node_modules/.package-lock.json: infra/package.json infra/package-lock.json
	cd infra && npm ci --no-audit --no-fund

infra-test: infra-deps ## CDK stack tests (assertions, cdk-nag), synthesized with the pinned CLI's node
	cd infra && $(GO) vet ./... && $(GO) test -count=1 ./...

synth: build infra-deps ## synthesize the CloudFormation template of STAGE into infra/cdk.out
	cd infra && npx cdk synth -c stage=$(STAGE) --quiet

security: synth venv-lint ## cdk-nag, cfn-lint and checkov results on the synthesized STAGE; fails on a finding not justified in infra/lint/findings.json
	$(GO) run ./cmd/security-report -cdk-out infra/cdk.out -findings infra/lint/findings.json -venv $(VENV_LINT)

venv-lint: $(VENV_LINT)/.requirements ## Python virtualenv with the pinned cfn-lint and checkov (infra/lint/requirements.txt)

$(VENV_LINT)/.requirements: infra/lint/requirements.txt
	@command -v python3 >/dev/null || { echo "venv-lint: python3 not found: make security needs it (cfn-lint and checkov come from PyPI)"; exit 1; }
	python3 -m venv $(VENV_LINT) && $(VENV_LINT)/bin/pip install --quiet --disable-pip-version-check -r infra/lint/requirements.txt && \
	cp infra/lint/requirements.txt $@

local-up: venv ## start MiniStack from the virtualenv on 127.0.0.1:4566 (or use the MiniStack or LocalStack already there)
	bash localstack/local.sh up

local-deploy: venv infra-deps ## build the functions for this host, cdk bootstrap and deploy LOCAL_STAGE to the emulator on 127.0.0.1:4566
	STAGE=$(LOCAL_STAGE) bash localstack/local.sh deploy

local-e2e: venv infra-deps ## deploy to the emulator (starting MiniStack if none runs) and run sample job (a) and a schedule through the deployed API, queues and Lambdas
	STAGE=$(LOCAL_STAGE) bash localstack/local.sh e2e

local-down: ## stop the MiniStack that local-up started
	bash localstack/local.sh down

deploy: build infra-deps ## deploy STAGE to the AWS account of your credentials or AWS_PROFILE
	@if [ -z "$$AWS_PROFILE$$AWS_ACCESS_KEY_ID$$AWS_WEB_IDENTITY_TOKEN_FILE" ]; then \
	  echo "deploy: no AWS credentials: set AWS_PROFILE (or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) explicitly"; exit 1; fi
	@if [ -n "$$AWS_ENDPOINT_URL" ]; then echo "deploy: AWS_ENDPOINT_URL is set ($$AWS_ENDPOINT_URL); unset it to deploy to AWS"; exit 1; fi
	cd infra && npx cdk deploy -c stage=$(STAGE)

fmt-check: ## fail if any Go file is not gofmt'd
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path '*/node_modules/*'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet: ## go vet
	$(GO) vet ./...

unit: ## unit, conformance, property and crash tests (embedded backend), with the race detector
	$(GO) test -race -count=1 -timeout 20m ./...

scale: ## the full-size tests without the race detector, which slows SQLite some twentyfold: a 1,000,000-chunk recursive slice, REPLACE with 10,000 jobs
	$(GO) test -count=1 -timeout 20m -run 'TestRecursiveSlicingMillionChunks|TestReplaceLarge' ./shared/engine/

bench: ## benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...

corpus-sample: ## regenerate the committed corpus sample
	$(GO) run ./cmd/slicework gen-corpus --records 200 --seed 1 --out testdata/corpus/sample.ndjson

clean: ## remove the local data directory and the built functions
	rm -rf $(DATA) $(BUILD)
