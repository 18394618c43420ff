# slicework — `make run` runs the sample job locally; `make test` runs every test tier.
GO       ?= go
DATA     ?= .data
KIND     ?= keycount
RUN_ARGS ?=

VENV     ?= .venv

.PHONY: run serve test vet fmt-check unit race bench corpus-sample clean help venv

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

run: ## run sample job (a) end to end on the embedded backend (KIND=recompute for job b)
	$(GO) run ./cmd/slicework run --data $(DATA) --kind $(KIND) $(RUN_ARGS)

serve: ## serve the local function host and the API on 127.0.0.1:8080
	$(GO) run ./cmd/slicework serve --data $(DATA)

test: fmt-check vet venv unit ## every test tier

venv: $(VENV)/.requirements ## Python virtualenv with the pinned AWS-API emulators (MiniStack, moto)

$(VENV)/.requirements: localstack/requirements.txt
	@command -v python3 >/dev/null || { echo "python3 not found: the emulator test tiers will be skipped"; exit 0; }; \
	python3 -m venv $(VENV) && $(VENV)/bin/pip install --quiet --disable-pip-version-check -r localstack/requirements.txt && \
	cp localstack/requirements.txt $@

fmt-check: ## fail if any Go file is not gofmt'd
	@out="$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))"; \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet: ## go vet
	$(GO) vet ./...

unit: ## unit, conformance, property and crash tests (embedded backend), with the race detector
	$(GO) test -race -count=1 -timeout 20m ./...

bench: ## benchmarks
	$(GO) test -run '^$$' -bench . -benchmem ./...

corpus-sample: ## regenerate the committed corpus sample
	$(GO) run ./cmd/slicework gen-corpus --records 200 --seed 1 --out testdata/corpus/sample.ndjson

clean: ## remove the local data directory
	rm -rf $(DATA)
