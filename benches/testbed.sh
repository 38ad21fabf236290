#!/usr/bin/env bash
# The testbed's own figures (BENCHMARKS.md, "The testbed"): the time from
# `controlplane up` to a healthy control plane, and each component's memory,
# idle and under a load of N KWOK nodes running a Deployment of 20 pods per
# node (the registrar is not started: it needs an EC2 API).
#
#   benches/testbed.sh [RUNS] [NODES]      (defaults: 5 runs, 100 nodes)
#
# Prints one line per run (seconds to healthy) and a table of RSS in MiB per
# component: idle after `up`, and after the load is running.
set -euo pipefail
runs=${1:-5}
nodes=${2:-100}
here=$(cd "$(dirname "$0")/.." && pwd)
bin=$("$here/testbed/build")
dir=$(mktemp -d /tmp/dovetail-testbed-bench.XXXXXX)
trap '"$bin/controlplane" down "$dir/cp" >/dev/null 2>&1 || true; rm -rf "$dir"' EXIT

rss() { # the RSS in MiB of each component, as "name=MiB ..."
  "$bin/controlplane" status "$dir/cp" | python3 -c '
import json, sys
for name, pid in json.load(sys.stdin).items():
    kib = 0
    if pid:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                kib = int(line.split()[1])
    print(f"{name}={kib // 1024}", end=" ")
'
}

times=()
for i in $(seq "$runs"); do
  start=$(date +%s.%N)
  "$bin/controlplane" up "$dir/cp" 2>/dev/null
  end=$(date +%s.%N)
  times+=("$(echo "$end - $start" | bc)")
  echo "run $i: healthy after ${times[-1]} s"
  if [ "$i" -lt "$runs" ]; then
    "$bin/controlplane" down "$dir/cp"
    rm -rf "$dir/cp"
  fi
done
echo "median: $(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') s"

sleep 10
echo "idle RSS (MiB): $(rss)"

export KUBECONFIG="$dir/cp/kubeconfig"
for n in $(seq "$nodes"); do
  cat <<EOF
apiVersion: v1
kind: Node
metadata:
  name: bench-$n
  annotations: {kwok.x-k8s.io/node: fake}
  labels: {kubernetes.io/hostname: bench-$n}
status:
  capacity: {cpu: "8", memory: 32Gi, pods: "110"}
  allocatable: {cpu: "8", memory: 32Gi, pods: "110"}
---
EOF
done | "$bin/kubectl" apply -f - >/dev/null
"$bin/kubectl" create deployment load --image=registry.example.com/load:1 --replicas=0 >/dev/null
"$bin/kubectl" set resources deployment load --requests=cpu=300m,memory=1Gi >/dev/null
start=$(date +%s.%N)
"$bin/kubectl" scale deployment load --replicas=$((nodes * 20)) >/dev/null
until [ "$("$bin/kubectl" get deployment load -o jsonpath='{.status.readyReplicas}')" = "$((nodes * 20))" ]; do
  sleep 1
done
end=$(date +%s.%N)
echo "$((nodes * 20)) pods on $nodes KWOK nodes Running and Ready after $(echo "$end - $start" | bc) s"
echo "loaded RSS (MiB): $(rss)"
