#!/usr/bin/env bash
# webdb side by side with the peers of ../shared/peers: same generated workload, same run.
#   bench/run_bench.sh                                   # N=100k and 1M, every peer, 1 run each
#   SCALES="100000:10000" PEERS="webdb sqlite" bench/run_bench.sh
# The peers folder is read-only, so it is copied to $BENCH_DATA/peers with peer_webdb.py added;
# results land in $BENCH_DATA/peers/results.md and bench/results-<date>.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=${PEERS_SRC:-$here/../../shared/peers}
data=${BENCH_DATA:-$here/data}
mkdir -p "$data/peers"
cp "$src"/*.py "$src"/*.sh "$data/peers/"
cp "$here/peer_webdb.py" "$data/peers/"
# bench/ too: peer_webdb.py and the update agents import its round input (roundtsv.py).
export PYTHONPATH="$here/..:$here${PYTHONPATH:+:$PYTHONPATH}"
# The compiled block codec, built in place for the python that runs the peers (a `git archive`
# snapshot has none; without a compiler webdb runs its pure-Python fallback, as after pip install).
(cd "$here/.." && python3 setup.py -q build_ext --inplace) || echo "no compiled block codec: pure Python" >&2
PEERS=${PEERS:-"webdb sqlite duckdb sortmerge kv:leveldb kv:rocksdb"} RUNS=${RUNS:-1} BENCH_DATA="$data" \
  bash "$data/peers/run_peers.sh"
{ echo "machine: $(nproc) cores, $(free -g | awk '/Mem/{print $2}') GiB, $(uname -r); load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  cat "$data/peers/results.md"; } > "$here/results-$(date +%F).md"
echo "wrote $here/results-$(date +%F).md"
