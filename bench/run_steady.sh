#!/usr/bin/env bash
# Steady state (issue 13, goal P2): R rounds in a row, each drawn from the state the previous one
# left (webgraph.py --rounds R), for every peer at every scale, in one run; then the plot and table.
#   bench/run_steady.sh                                        # N=1M and 3M, 10 rounds, 4 peers
#   SCALES="100000:10000" ROUNDS=3 PEERS="webdb sortmerge" bench/run_steady.sh   # a quick look
#   SCALES="10000000:100000" PEERS="webdb sortmerge" APPEND=1 bench/run_steady.sh   # N=10M once
# Env: BENCH_DATA (data + scratch, default bench/data), PY (the python that runs the driver: it
#      needs the peers' modules, e.g. duckdb, rocksdict, psutil), APPEND=1 keeps earlier results,
#      PEERS_SRC (the peers folder, default ../shared/peers beside the checkout), COMMIT (the code's
#      commit when this runs from a `git archive` snapshot).
# Writes $BENCH_DATA/steady.jsonl (one driver line per peer and scale), bench/results-steady-<date>.md
# and docs/img/rounds-<date>.png (bench/plot_rounds.py).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${PEERS_SRC:-$here/../../shared/peers}
data=${BENCH_DATA:-$here/data}
PY=${PY:-python3}
ROUNDS=${ROUNDS:-10}
PEERS=${PEERS:-"webdb sortmerge kv:rocksdb sqlite"}
SCALES=${SCALES-"1000000:100000 3000000:100000"}
res=$data/steady.jsonl
mkdir -p "$data/peers"
cp "$src"/*.py "$src"/*.sh "$data/peers/"
cp "$here/peer_webdb.py" "$data/peers/"
export PYTHONPATH="$here/..:$here${PYTHONPATH:+:$PYTHONPATH}"
# The compiled block codec, built in place for the python that runs the peers (a `git archive`
# snapshot has none; without a compiler webdb runs its pure-Python fallback, as after pip install).
(cd "$here/.." && "$PY" setup.py -q build_ext --inplace) || echo "no compiled block codec: pure Python" >&2
[ "${APPEND:-0}" = 1 ] || : > "$res"

gen() {  # N F: the workload with ROUNDS rounds, cached per (N, F, ROUNDS)
  local dir=$data/r$ROUNDS-n$1-f$2
  [ -f "$dir/meta.json" ] || "$PY" "$data/peers/webgraph.py" --pages "$1" --round "$2" --seed 42 \
    --rounds "$ROUNDS" --out "$dir" >/dev/null
  echo "$dir"
}

for s in $SCALES; do
  dir=$(gen "${s%:*}" "${s#*:}")
  for p in $PEERS; do
    name=${p%%:*} opt=${p#*:}
    [ "$opt" = "$p" ] && opt=""
    [ "$name" = kv ] && opt="engine=$opt"
    echo "$(date +%T) $p N=${s%:*} rounds=$ROUNDS load=$(cut -d' ' -f1 /proc/loadavg)" >&2
    (cd "$data/peers" && "$PY" driver.py --peer "$name" --opt "$opt" --data "$dir" --work "$data/work" \
      --rounds "$ROUNDS" 2>>"$data/errors.log" | tail -1) >> "$res"
    rm -rf "$data/work"
  done
done

day=$(date +%F)
mkdir -p "$here/../docs/img"
{ echo "machine: $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB, $(uname -r);" \
    "commit ${COMMIT:-$(git -C "$here" rev-parse --short HEAD 2>/dev/null || echo '?')}; $(date -u '+%F %H:%M UTC')"
  echo
  "$PY" "$here/plot_rounds.py" "$res" --png "$here/../docs/img/rounds-$day.png"; } > "$here/results-steady-$day.md"
cat "$here/results-steady-$day.md"
