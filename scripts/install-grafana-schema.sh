#!/usr/bin/env bash
# Grafana's current dashboard model for the dashboards' type check
# (tests/unit/test_dashboards_schema.py, scripts/dashboard_types.py): @grafana/schema and
# TypeScript from npm, under .cache/grafana-schema (idempotent; versions pinned there).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
dir=.cache/grafana-schema
want="$(python3 -c 'import scripts.dashboard_types as t; print(t.VERSION, t.TYPESCRIPT)')"
if [[ -f $dir/installed && "$(cat "$dir/installed")" == "$want" ]]; then
    exit 0
fi
command -v npm >/dev/null || {
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq && apt-get install -y -qq --no-install-recommends nodejs npm >/dev/null
}
read -r schema typescript <<<"$want"
mkdir -p "$dir"
echo '{"private": true}' > "$dir/package.json"
npm install --prefix "$dir" --no-audit --no-fund --silent \
    "@grafana/schema@$schema" "typescript@$typescript"
echo "$want" > "$dir/installed"
