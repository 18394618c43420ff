#!/usr/bin/env bash
# local.sh — run the whole stack on a local AWS-API emulator, with no Docker.
#
#   local.sh up       start MiniStack from the virtualenv on 127.0.0.1:4566,
#                     unless an emulator (MiniStack or LocalStack) already answers there
#   local.sh deploy   build the functions for this host, cdk bootstrap + deploy STAGE
#   local.sh e2e      up, deploy, run the end-to-end check (localstack/e2e), down
#   local.sh down     stop the MiniStack that `up` started
#
# Environment: SLICEWORK_LOCAL_PORT (4566), STAGE (local), VENV (.venv), GO (go).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$PWD
PORT=${SLICEWORK_LOCAL_PORT:-4566}
ENDPOINT=http://127.0.0.1:$PORT
STAGE=${STAGE:-local}
VENV=${VENV:-.venv}
GO=${GO:-go}
STATE=$ROOT/.local
mkdir -p "$STATE"

# Credentials and region for the emulator; never real ones.
export AWS_ENDPOINT_URL=$ENDPOINT AWS_ACCESS_KEY_ID=test AWS_SECRET_ACCESS_KEY=test
export AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1
unset AWS_PROFILE AWS_SESSION_TOKEN
ACCOUNT=000000000000

log() { printf 'local: %s\n' "$*" >&2; }

# emulator prints "ministack" or "localstack" for what answers on PORT, or nothing.
emulator() {
  if curl -fsS -m 2 "$ENDPOINT/_ministack/health" >/dev/null 2>&1; then echo ministack
  elif curl -fsS -m 2 "$ENDPOINT/_localstack/health" >/dev/null 2>&1; then echo localstack
  fi
}

up() {
  local running
  running=$(emulator)
  if [ -n "$running" ]; then
    log "$running already answers on $ENDPOINT; using it"
    return 0
  fi
  [ -x "$VENV/bin/ministack" ] || { log "no $VENV/bin/ministack: run make venv"; exit 1; }
  log "starting MiniStack on $ENDPOINT (log: $STATE/ministack.log)"
  # AWS_ENDPOINT_URL in MiniStack's environment is what its Lambda
  # bootstraps get, so the functions call back into the emulator.
  GATEWAY_PORT=$PORT BIND_HOST=127.0.0.1 MINISTACK_HOST=127.0.0.1 MINISTACK_REGION=$AWS_REGION \
    IOT_MTLS_ENABLED=0 SFTP_ENABLED=0 LOG_LEVEL=INFO \
    nohup "$VENV/bin/ministack" >"$STATE/ministack.log" 2>&1 &
  echo $! >"$STATE/ministack.pid"
  for _ in $(seq 1 100); do
    [ "$(emulator)" = ministack ] && { log "MiniStack is up (pid $(cat "$STATE/ministack.pid"))"; return 0; }
    kill -0 "$(cat "$STATE/ministack.pid")" 2>/dev/null || { log "MiniStack exited:"; tail -20 "$STATE/ministack.log" >&2; exit 1; }
    sleep 0.2
  done
  log "MiniStack did not answer within 20 s"; exit 1
}

down() {
  if [ -f "$STATE/ministack.pid" ]; then
    local pid
    pid=$(cat "$STATE/ministack.pid")
    if kill "$pid" 2>/dev/null; then
      for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
      kill -9 "$pid" 2>/dev/null || true
      log "stopped MiniStack (pid $pid)"
    fi
    rm -f "$STATE/ministack.pid"
  else
    log "no MiniStack started by local.sh up"
  fi
}

# Known gaps of each emulator's CloudFormation (localstack/README.md).
gaps() {
  case "$1" in
    ministack) echo metric-math-alarm ;;
    *) echo "" ;;
  esac
}

deploy() {
  local emu arch
  emu=$(emulator)
  [ -n "$emu" ] || { log "no emulator on $ENDPOINT: run make local-up"; exit 1; }
  # The emulator runs bootstraps as host processes (MiniStack) or in
  # containers of the host's architecture (LocalStack).
  case "$(uname -m)" in
    x86_64|amd64) arch=x86_64; goarch=amd64 ;;
    aarch64|arm64) arch=arm64; goarch=arm64 ;;
    *) log "unsupported host architecture $(uname -m)"; exit 1 ;;
  esac
  log "building the functions for linux/$goarch"
  "$GO" run ./cmd/build-functions -out "$STATE/build" -arch "$goarch" >/dev/null
  ( cd infra
    [ -d node_modules ] || npm ci --no-audit --no-fund
    log "cdk bootstrap aws://$ACCOUNT/$AWS_REGION on $emu"
    npx cdk bootstrap "aws://$ACCOUNT/$AWS_REGION" --output "$STATE/cdk.out" -c stage="$STAGE" \
      -c buildDir="$STATE/build" -c architecture=$arch -c emulatorGaps="$(gaps "$emu")" >"$STATE/bootstrap.log" 2>&1 ||
      { tail -30 "$STATE/bootstrap.log" >&2; exit 1; }
    log "cdk deploy slicework-$STAGE on $emu (gaps: $(gaps "$emu"))"
    npx cdk deploy "slicework-$STAGE" --require-approval never --output "$STATE/cdk.out" \
      --outputs-file "$STATE/outputs.json" -c stage="$STAGE" -c buildDir="$STATE/build" -c architecture=$arch \
      -c emulatorGaps="$(gaps "$emu")" >"$STATE/deploy.log" 2>&1 ||
      { grep -v IN_PROGRESS "$STATE/deploy.log" | tail -30 >&2; exit 1; }
  )
  log "deployed; outputs in $STATE/outputs.json"
}

e2e() {
  local started=""
  [ -n "$(emulator)" ] || started=yes
  up
  [ -z "$started" ] || trap down EXIT
  deploy
  "$GO" run ./localstack/e2e -stack "slicework-$STAGE" -outputs "$STATE/outputs.json" -emulator "$(emulator)" \
    -template "$STATE/cdk.out/slicework-$STAGE.template.json"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  deploy) deploy ;;
  e2e) e2e ;;
  *) echo "usage: $0 up|deploy|e2e|down" >&2; exit 2 ;;
esac
