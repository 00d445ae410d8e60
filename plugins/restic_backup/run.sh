#!/usr/bin/env bash
# restic_backup: `restic backup` of config.paths (protocol v2; request on stdin, response on stdout).
# Needs bash, jq and restic; curl only to probe a `rest:` repository before using it.
#
# Secrets (RESTIC_REPOSITORY[_FALLBACK], RESTIC_PASSWORD, a backend's keys) come from the
# operator's env_file, never from config or the job's payload, and reach restic through its
# environment only: no secret is ever an argument of any process here (argv is world-readable in
# /proc). Every text this plugin answers with is scrubbed of them first.
set -uo pipefail

if ! command -v jq >/dev/null 2>&1; then
  # Nothing here can encode arbitrary text without jq: a fixed answer.
  printf '%s\n' '{"status":"error","error":"jq not found on PATH: restic_backup reads its request with it","retry":false,"logs":[]}'
  exit 0
fi

request=$(cat)
warnings=()  # log lines of level warn, sent with whatever the answer is
secrets=()   # values scrubbed from every text this plugin answers with

scrub() {
  local text=$1 secret
  for secret in "${secrets[@]+"${secrets[@]}"}"; do
    text=${text//"$secret"/[redacted]}
  done
  # user:password@ in a repository URL, wherever restic's own messages repeat it.
  printf '%s' "$text" | sed -E 's#//[^@/[:space:]]*@#//#g'
}

# reply STATUS TEXT [RETRY]: the response envelope, its text (result or error) scrubbed.
reply() {
  local status=$1 text retry=${3:-false} warning logs
  text=$(scrub "$2")
  logs=$(for warning in "${warnings[@]+"${warnings[@]}"}"; do scrub "$warning"; printf '\n'; done)
  jq -cn --arg status "$status" --arg text "$text" --argjson retry "$retry" --arg warnings "$logs" '
    ($warnings | split("\n") | map(select(length > 0) | {level: "warn", message: .})) as $logs
    | if $status == "ok"
      then {status: "ok", result: $text, events: [], logs: ($logs + [{level: "info", message: $text}])}
      else {status: "error", error: $text, retry: $retry, logs: ($logs + [{level: "error", message: $text}])}
      end'
  exit 0
}

config=$(jq -c '.config // {} | if type == "object" then . else {} end' <<<"$request" 2>/dev/null) \
  || reply error "the request on stdin is not JSON"
command=$(jq -r '.command // "poll"' <<<"$request")

# A string or a list of strings, one item per line (a list may not hold anything else).
config_list() {
  jq -r --arg key "$1" '.[$key] // [] | if type == "string" then [.] else . end
    | if type == "array" and all(type == "string") then .[] else error("bad") end' <<<"$config" 2>/dev/null
}
config_text() {
  jq -r --arg key "$1" --arg default "$2" '.[$key] // $default | tostring' <<<"$config"
}

env_file=$(config_text env_file "")
host=$(config_text host "")
tag=$(config_list tag) || reply error "config.tag must be a string or a list of strings"
[ -n "$tag" ] || tag=scheduled

# --- restic: the gateway's PATH may lack where it was installed ---
restic_bin=$(command -v restic 2>/dev/null || true)
for candidate in /usr/local/bin/restic /usr/bin/restic /opt/homebrew/bin/restic; do
  [ -n "$restic_bin" ] && break
  [ -x "$candidate" ] && restic_bin=$candidate
done
[ -n "$restic_bin" ] || reply error "restic not found (PATH or known locations)"

# --- secrets: env_file's KEY=VALUE lines, read, never run ---
# The original sources the file; reading it takes the same assignments (`export` and quotes
# allowed) without running anything else it holds. Values are literal: no $VAR, no $(...).
secret_key='(PASSWORD|SECRET|TOKEN|KEY|CREDENTIAL)'
load_env_file() {
  local line key value number=0
  while IFS= read -r line || [ -n "$line" ]; do
    number=$((number + 1))
    line=${line%$'\r'}
    [[ $line =~ ^[[:space:]]*(#.*)?$ ]] && continue
    # Upper-case names only: none of this script's own (lower-case) variables can be overwritten.
    if ! [[ $line =~ ^[[:space:]]*(export[[:space:]]+)?([A-Z_][A-Z0-9_]*)=(.*)$ ]]; then
      warnings+=("env_file $env_file line $number is not KEY=VALUE with an upper-case KEY: ignored")
      continue
    fi
    key=${BASH_REMATCH[2]}
    value=${BASH_REMATCH[3]}
    if [[ $key =~ ^(IFS|PATH|ENV|PS[0-9]|SHELLOPTS|BASHOPTS|BASH.*|LD_.*)$ ]]; then
      warnings+=("env_file $env_file line $number sets $key, which would change how this plugin runs: ignored")
      continue
    fi
    if [[ $value =~ ^\"(.*)\"[[:space:]]*$ || $value =~ ^\'(.*)\'[[:space:]]*$ ]]; then
      value=${BASH_REMATCH[1]}
    else
      value=$(sed -E 's/[[:space:]]+#.*$//; s/[[:space:]]+$//' <<<"$value")
    fi
    export "$key=$value"
    if [[ $key =~ $secret_key && ${#value} -ge 4 ]]; then
      secrets+=("$value")
    fi
  done <"$env_file"
}
if [ -z "$env_file" ]; then
  env_note="no env_file configured"
elif [ ! -r "$env_file" ] || [ ! -f "$env_file" ]; then
  env_note="env_file $env_file does not exist or cannot be read"
else
  env_note="env_file=$env_file"
  load_env_file
  if [ -n "$(find "$env_file" -maxdepth 0 -perm /077 2>/dev/null)" ]; then
    warnings+=("env_file $env_file can be read by others than its owner: chmod 600 it")
  fi
fi
# The gateway's own environment (service.plugin_env_passthrough) may hold them too, as in the original.
if [ -n "${RESTIC_PASSWORD:-}" ] && [ "${#RESTIC_PASSWORD}" -ge 4 ]; then
  secrets+=("$RESTIC_PASSWORD")
fi
if [ -z "${RESTIC_PASSWORD:-}${RESTIC_PASSWORD_FILE:-}${RESTIC_PASSWORD_COMMAND:-}" ]; then
  reply error "RESTIC_PASSWORD not set ($env_note): set RESTIC_PASSWORD (or RESTIC_PASSWORD_FILE) there"
fi
if [ -z "${RESTIC_REPOSITORY:-}${RESTIC_REPOSITORY_FALLBACK:-}" ]; then
  reply error "RESTIC_REPOSITORY not set ($env_note): set RESTIC_REPOSITORY (and optionally RESTIC_REPOSITORY_FALLBACK) there"
fi

# --- the repository: the primary, else the fallback, by a bounded probe ---
# Why a probe: restic retries an unreachable REST server for minutes; curl gives up in 5 s, so a
# dead primary fails over to the fallback within the job's timeout. Other backends are not probed.
probe() {
  local url
  case $1 in
    rest:*) ;;
    *) return 0 ;;
  esac
  if ! command -v curl >/dev/null 2>&1; then
    warnings+=("curl not found: $1 is used without probing it")
    return 0
  fi
  url=${1#rest:}
  url="${url%/}/config"
  url=${url//\\/\\\\}
  # The URL (credentials and all) goes to curl on stdin, not in its arguments.
  printf 'url = "%s"\nmax-time = 5\nconnect-timeout = 5\nfail\nsilent\noutput = /dev/null\n' "${url//\"/\\\"}" \
    | curl -K - 2>/dev/null
}
repository=""
for candidate in "${RESTIC_REPOSITORY:-}" "${RESTIC_REPOSITORY_FALLBACK:-}"; do
  [ -n "$candidate" ] || continue
  if probe "$candidate"; then
    repository=$candidate
    break
  fi
  warnings+=("restic repository $candidate is not reachable")
done
[ -n "$repository" ] || reply error "no reachable restic repo (primary or fallback)" true
export RESTIC_REPOSITORY=$repository
unset RESTIC_REPOSITORY_FALLBACK

# restic's stdout and stderr together; stdin closed so it never waits for a typed password.
run_restic() {
  "$restic_bin" "$@" </dev/null 2>&1
}

# The last $1 lines of $2 on one line.
last_lines() {
  tail -n "$1" <<<"$2" | tr '\n' ' ' | sed -E 's/ +/ /g; s/ $//'
}

# A failure no retry can mend: a wrong password, no repository there (restic >= 0.17 says so by
# exit code; older ones only in words), none of the paths there.
permanent() {
  local rc=$1 output=$2
  case $rc in 10 | 12) return 0 ;; esac
  [[ $output == *"wrong password"* || $output == *"Is there a repository at the following location"* ||
    $output == *"all target directories/files do not exist"* ]]
}

case $command in
  health)
    if output=$(run_restic cat config --no-lock); then
      reply ok "repo reachable + creds ok: $repository"
    fi
    reply error "repo $repository reachable but restic cat config failed (bad password?): $(last_lines 2 "$output")"
    ;;
  poll | handle)
    paths=$(config_list paths) || reply error "config.paths must be a string or a list of strings"
    [ -n "$paths" ] || reply error "no source paths configured"
    excludes=$(config_list excludes) || reply error "config.excludes must be a string or a list of strings"
    args=(backup)
    while IFS= read -r item; do args+=("--tag=$item"); done <<<"$tag"
    [ -n "$host" ] && args+=("--host=$host")
    if [ -n "$excludes" ]; then
      while IFS= read -r item; do args+=("--exclude=$item"); done <<<"$excludes"
    fi
    # After `--` a path that starts with '-' stays a path.
    args+=(--)
    while IFS= read -r item; do [ -n "$item" ] && args+=("$item"); done <<<"$paths"
    output=$(run_restic "${args[@]}")
    rc=$?
    if [ "$rc" -eq 0 ]; then
      summary=$(last_lines 3 "$(grep -E 'Added to the repo|processed [0-9]|snapshot [0-9a-f]+ saved' <<<"$output")")
      reply ok "backup ok -> $repository : ${summary:-completed}"
    fi
    detail=$(last_lines 4 "$output")
    if [ "$rc" -eq 3 ]; then
      # restic saved a snapshot without the files it could not read: another try reads no more.
      reply error "restic backup incomplete (rc=3: some source files could not be read, the snapshot lacks them): $detail"
    fi
    if permanent "$rc" "$output"; then
      reply error "restic backup failed (rc=$rc): $detail"
    fi
    reply error "restic backup failed (rc=$rc): $detail" true
    ;;
  *)
    reply error "unknown command: $command"
    ;;
esac
