#!/usr/bin/env python3
"""dovetail at scale on the real control plane (BENCHMARKS.md, "At scale on
the testbed"): the production binary with `--cloud kwok`, the testbed's
kube-apiserver, etcd, kube-controller-manager, kube-scheduler and KWOK,
tuned for load as kwokctl tunes them.

    benches/scale.py [--nodes 500 1000 2000] [--pods-per-node 20]
                     [--idle-seconds 60] [--phase-timeout 3600]
                     [--node-lease-seconds 40] [--node-monitor-grace-period 40s]
                     [--dovetail BIN] [--json FILE] [--logs DIR]

For each size N, one run on a fresh control plane:
  burst   Deployments of N x 20 pods, each pod a twentieth of an m5.2xlarge
          (the NodePool's only type): the time until every pod is Running
          and Ready, the pods' pending time (creation to Ready, p50/p99),
          the NodeClaims launched;
  idle    60 s (--idle-seconds) with nothing to do;
  down    every Deployment scaled to 20%: the time until consolidation has
          brought the fleet to the lower bound (or has stopped changing for
          120 s, or for a quarter of a second per node where that is
          longer: deleting the pods through a busy control plane keeps
          nodes' pod events recent), and the fleet's price against that
          bound.
A phase that has not finished after --phase-timeout seconds is recorded as
unfinished, with how far it got.

KWOK renews each Node's Lease every quarter of --node-lease-seconds, as a
kubelet does, and kube-controller-manager marks a Node whose Lease is older
than --node-monitor-grace-period NotReady (kwokctl's NodeLeaseDurationSeconds
and KubeControllerManagerNodeMonitorGracePeriodMilliseconds). Here the
simulated kubelets share the machine with the control plane: at thousands of
Nodes their heartbeats alone can fall behind, and Nodes then flap NotReady.
For each phase: dovetail's API requests per minute by verb and resource
(from the API server's audit log, user system:serviceaccount:dovetail:*),
and each process's CPU seconds and peak RSS (from /proc).

dovetail is built with `cargo build --release` (CARGO_TARGET_DIR is honoured);
the testbed with testbed/build. Nothing but 127.0.0.1 is contacted.
"""

import argparse
import glob
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import datetime, timezone

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
TYPE = "m5.2xlarge"
DEPLOYMENT_SIZE = 500

# kwokctl's tuning for load (kwok's --disable-qps-limits), and a short
# event TTL.
TUNING = [
    "kube-apiserver:--max-requests-inflight=0",
    "kube-apiserver:--max-mutating-requests-inflight=0",
    "kube-apiserver:--enable-priority-and-fairness=false",
    "kube-apiserver:--event-ttl=5m",
    "kube-controller-manager:--kube-api-qps=5000",
    "kube-controller-manager:--kube-api-burst=10000",
    "kube-scheduler:--kube-api-qps=5000",
    "kube-scheduler:--kube-api-burst=10000",
    # The audit log is where dovetail's requests are counted: every rotated
    # file is kept (a 2,000-node burst logs 200 MB in six minutes, and the
    # testbed keeps two by default).
    "kube-apiserver:--audit-log-maxbackup=0",
]

NODECLASS = """apiVersion: karpenter.k8s.aws/v1
kind: EC2NodeClass
metadata:
  name: default
spec:
  amiSelectorTerms: [{alias: al2023@latest}]
  role: KarpenterNodeRole-scale
  subnetSelectorTerms: [{tags: {karpenter.sh/discovery: scale}}]
  securityGroupSelectorTerms: [{tags: {karpenter.sh/discovery: scale}}]
"""

NODEPOOL = f"""apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: default
spec:
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 30s
  template:
    spec:
      nodeClassRef: {{group: karpenter.k8s.aws, kind: EC2NodeClass, name: default}}
      expireAfter: Never
      requirements:
        - {{key: karpenter.sh/capacity-type, operator: In, values: [on-demand]}}
        - {{key: node.kubernetes.io/instance-type, operator: In, values: [{TYPE}]}}
"""


def run(*args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw).stdout


class Plane:
    def __init__(self, bin_dir, work, lease_seconds, grace):
        self.bin = bin_dir
        self.dir = os.path.join(work, "cp")
        cmd = [os.path.join(bin_dir, "controlplane"), "up", self.dir,
               "--watch-pid", str(os.getpid()), "--node-monitor-grace-period", grace]
        for t in TUNING + [f"kwok:--node-lease-duration-seconds={lease_seconds}"]:
            cmd += ["--extra", t]
        run(*cmd)
        self.kubeconfig = os.path.join(self.dir, "kubeconfig")

    def kubectl(self, *args, stdin=None):
        return run(os.path.join(self.bin, "kubectl"), "--kubeconfig", self.kubeconfig,
                   *args, input=stdin)

    def json(self, *args):
        return json.loads(self.kubectl(*args, "-o", "json"))

    def pids(self):
        return json.loads(run(os.path.join(self.bin, "controlplane"), "status", self.dir))

    def down(self):
        subprocess.run([os.path.join(self.bin, "controlplane"), "down", self.dir],
                       capture_output=True)


def proc(pid):
    """CPU seconds and peak RSS (MiB) of a process."""
    try:
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        hwm = 0
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmHWM:"):
                hwm = int(line.split()[1]) // 1024
        return cpu, hwm
    except OSError:
        return 0.0, 0


def parse_time(s):
    return datetime.strptime(s, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp()


def audit(plane, since, until):
    """dovetail's requests between two times: {(verb, resource): count}."""
    counts = {}
    for path in glob.glob(os.path.join(plane.dir, "audit*.log")):
        with open(path) as f:
            for line in f:
                if "system:serviceaccount:dovetail" not in line:
                    continue
                e = json.loads(line)
                if e.get("stage") != "ResponseComplete":
                    continue
                if not e["user"]["username"].startswith("system:serviceaccount:dovetail:"):
                    continue
                t = datetime.fromisoformat(e["requestReceivedTimestamp"].replace("Z", "+00:00")).timestamp()
                if not since <= t < until:
                    continue
                ref = e.get("objectRef") or {}
                resource = ref.get("resource", e.get("requestURI", "?"))
                if ref.get("subresource"):
                    resource += "/" + ref["subresource"]
                key = (e["verb"], resource)
                counts[key] = counts.get(key, 0) + 1
    return counts


def percentile(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, math.ceil(p / 100 * len(values)) - 1)]


def ready_pods(plane):
    total = 0
    for d in plane.json("get", "deployments", "-n", "default")["items"]:
        total += d.get("status", {}).get("readyReplicas", 0) or 0
    return total


def fleet(plane):
    """Live NodeClaims, their price (each instance's launch price, from its
    Node's record), and the cheapest price among them."""
    prices = {}
    for n in plane.json("get", "nodes")["items"]:
        record = n["metadata"].get("annotations", {}).get("kwok.dovetail.dev/instance")
        if record:
            prices[n["spec"].get("providerID")] = json.loads(record)["price"]
    claims = [c for c in plane.json("get", "nodeclaims")["items"]
              if not c["metadata"].get("deletionTimestamp")]
    priced = [prices.get(c.get("status", {}).get("providerID"), 0.0) for c in claims]
    return len(claims), sum(priced), min(priced, default=0.0)


def one(bin_dir, dovetail, nodes, per_node, a):
    work = tempfile.mkdtemp(prefix="dovetail-scale-")
    plane = Plane(bin_dir, work, a.node_lease_seconds, a.node_monitor_grace_period)
    controller = None
    try:
        overlay = os.path.join(work, "overlay")
        os.makedirs(overlay)
        rel = os.path.relpath(os.path.join(ROOT, "deploy"), overlay)
        with open(os.path.join(overlay, "kustomization.yaml"), "w") as f:
            f.write(f"resources: [{rel}]\ncomponents: [{rel}/components/kwok]\n")
        plane.kubectl("apply", "-k", overlay)
        token = plane.kubectl("create", "token", "dovetail", "-n", "dovetail", "--duration=24h").strip()
        admin = json.loads(run(os.path.join(bin_dir, "kubectl"), "--kubeconfig", plane.kubeconfig,
                               "config", "view", "--raw", "-o", "json"))
        sa = os.path.join(work, "sa.kubeconfig")
        with open(sa, "w") as f:
            json.dump({"apiVersion": "v1", "kind": "Config",
                       "clusters": [{"name": "tb", "cluster": admin["clusters"][0]["cluster"]}],
                       "users": [{"name": "sa", "user": {"token": token}}],
                       "contexts": [{"name": "sa", "context": {"cluster": "tb", "user": "sa"}}],
                       "current-context": "sa"}, f)
        repo = os.path.join(work, "repo")
        os.makedirs(repo)
        for name, text in [("nodeclass.yaml", NODECLASS), ("nodepool.yaml", NODEPOOL)]:
            with open(os.path.join(repo, name), "w") as f:
                f.write(text)
        git = ["git", "-C", repo, "-c", "user.name=bench", "-c", "user.email=bench@example.com"]
        run(*git, "init", "-q", "-b", "main")
        run(*git, "add", "-A")
        run(*git, "commit", "-q", "-m", "config")
        log = open(os.path.join(work, "controller.log"), "w")
        controller = subprocess.Popen(
            [dovetail, "controller", "--kubeconfig", sa, "--cloud", "kwok",
             "--cluster-name", "scale", "--config-repo", repo, "--config-branch", "main",
             "--namespace", "dovetail", "--identity", "scale",
             "--metrics-port", "0", "--health-port", "0"],
            stdout=subprocess.DEVNULL, stderr=log,
            env={**os.environ, "DOVETAIL_LOG_LEVEL": os.environ.get("DOVETAIL_LOG_LEVEL", "warn")})
        deadline = time.time() + 120
        while time.time() < deadline:
            if plane.json("get", "nodepools")["items"]:
                break
            time.sleep(1)
        time.sleep(5)
        pids = {**plane.pids(), "dovetail": controller.pid}
        pids = {k: v for k, v in pids.items() if v}
        out = {"nodes": nodes, "pods": nodes * per_node, "phases": {},
               "node_lease_seconds": a.node_lease_seconds,
               "node_monitor_grace_period": a.node_monitor_grace_period}
        # Listing every Node and NodeClaim costs the API server and kubectl
        # about a second of CPU at 2,000 Nodes: poll no more often than that
        # costs at each size.
        poll = max(2, nodes // 200)
        quiet = max(120, nodes // 4)

        def phase(name, body):
            cpu0 = {k: proc(p)[0] for k, p in pids.items()}
            start = time.time()
            extra = body() or {}
            end = time.time()
            minutes = max((end - start) / 60, 1e-9)
            reqs = audit(plane, start, end)
            out["phases"][name] = {
                "seconds": round(end - start, 1),
                **extra,
                "dovetail_requests_per_minute": {f"{v} {r}": round(c / minutes, 1)
                                                 for (v, r), c in sorted(reqs.items())},
                "dovetail_requests": sum(reqs.values()),
                "cpu_seconds": {k: round(proc(p)[0] - cpu0[k], 1) for k, p in pids.items()},
                "peak_rss_mib": {k: proc(p)[1] for k, p in pids.items()},
            }
            print(f"  {name}: {out['phases'][name]['seconds']} s", file=sys.stderr, flush=True)

        total = nodes * per_node
        cpu_millis = 7910 // per_node  # m5.2xlarge allocatable CPU, a twentieth each

        def burst():
            manifests = []
            left, i = total, 0
            while left > 0:
                n = min(DEPLOYMENT_SIZE, left)
                manifests.append(f"""apiVersion: apps/v1
kind: Deployment
metadata: {{name: load-{i}, namespace: default}}
spec:
  replicas: {n}
  selector: {{matchLabels: {{app: load-{i}}}}}
  template:
    metadata: {{labels: {{app: load-{i}}}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: app
          image: registry.example.com/load:1
          resources: {{requests: {{cpu: {cpu_millis}m, memory: 1Gi}}}}
""")
                left -= n
                i += 1
            plane.kubectl("apply", "-f", "-", stdin="---\n".join(manifests))
            deadline = time.time() + a.phase_timeout
            ready = 0
            while ready < total and time.time() < deadline:
                time.sleep(2)
                ready = ready_pods(plane)
            if ready < total:
                claims, price, _ = fleet(plane)
                return {"finished": False, "ready_pods": ready, "nodeclaims": claims,
                        "price_per_hour": round(price, 3)}
            pods = plane.json("get", "pods", "-n", "default")["items"]
            pending = []
            for p in pods:
                created = parse_time(p["metadata"]["creationTimestamp"])
                for c in p.get("status", {}).get("conditions", []):
                    if c["type"] == "Ready" and c["status"] == "True":
                        pending.append(parse_time(c["lastTransitionTime"]) - created)
            claims, price, _ = fleet(plane)
            return {"finished": True, "pending_p50_s": percentile(pending, 50), "pending_p99_s": percentile(pending, 99),
                    "nodeclaims": claims, "price_per_hour": round(price, 3)}

        def idle():
            time.sleep(a.idle_seconds)
            return {}

        def down():
            kept = 0
            for d in plane.json("get", "deployments", "-n", "default")["items"]:
                keep = math.ceil(d["spec"]["replicas"] * 0.2)
                kept += keep
                plane.kubectl("scale", "deployment", d["metadata"]["name"], "-n", "default",
                              f"--replicas={keep}")
            bound = math.ceil(kept / per_node)
            last, since = None, time.time()
            deadline = time.time() + a.phase_timeout
            while True:
                claims, price, cheapest = fleet(plane)
                if claims != last:
                    last, since = claims, time.time()
                if claims <= bound or time.time() - since > quiet or time.time() > deadline:
                    break
                time.sleep(poll)
            settled = since if claims > bound else time.time()
            return {"finished": claims <= bound, "consolidated_after_s": round(settled - start_down[0], 1), "nodeclaims": claims,
                    "lower_bound_nodeclaims": bound, "price_per_hour": round(price, 3),
                    "lower_bound_price_per_hour": round(bound * cheapest, 3)}

        phase("burst", burst)
        phase("idle", idle)
        start_down = [time.time()]
        phase("down", down)
        return out
    finally:
        if controller:
            controller.terminate()
            controller.wait()
        plane.down()
        if a.logs:
            os.makedirs(a.logs, exist_ok=True)
            kept = [(os.path.join(work, "controller.log"), f"controller-{nodes}.log")]
            kept += [(p, f"{nodes}-{os.path.basename(p)}")
                     for p in glob.glob(os.path.join(plane.dir, "audit*.log"))]
            for src, name in kept:
                if os.path.exists(src):
                    shutil.copy(src, os.path.join(a.logs, name))
        shutil.rmtree(work, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--nodes", type=int, nargs="+", default=[500, 1000, 2000])
    ap.add_argument("--pods-per-node", type=int, default=20)
    ap.add_argument("--idle-seconds", type=int, default=60, help="the idle phase's length")
    ap.add_argument("--phase-timeout", type=int, default=3600,
                    help="seconds after which the burst or the scale-down is recorded unfinished")
    ap.add_argument("--node-lease-seconds", type=int, default=40,
                    help="KWOK's Node Lease duration (renewed every quarter of it)")
    ap.add_argument("--node-monitor-grace-period", default="40s",
                    help="how long kube-controller-manager keeps a Node without a heartbeat Ready")
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("--logs", help="keep each run's controller log (at DOVETAIL_LOG_LEVEL, default warn) "
                    "and the API server's audit log in this directory")
    ap.add_argument("--dovetail", help="the dovetail binary [default: cargo build --release]")
    a = ap.parse_args()
    bin_dir = os.environ.get("DOVETAIL_TESTBED_BIN") or run(os.path.join(ROOT, "testbed", "build")).strip()
    dovetail = a.dovetail
    if not dovetail:
        target = os.environ.get("CARGO_TARGET_DIR", os.path.join(ROOT, "target"))
        subprocess.run(["cargo", "build", "--release", "-q"], cwd=ROOT, check=True)
        dovetail = os.path.join(target, "release", "dovetail")
    results = []
    for n in a.nodes:
        print(f"{n} nodes:", file=sys.stderr, flush=True)
        load = os.getloadavg()
        r = one(bin_dir, dovetail, n, a.pods_per_node, a)
        r["loadavg_before"] = [round(x, 2) for x in load]
        results.append(r)
        print(json.dumps(r, indent=1), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
