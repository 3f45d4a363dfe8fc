#!/usr/bin/env python3
"""Cross-checks the deployment files against each other and against the binaries (CTest
`deploy.manifests`, label `deploy`).

- deploy/kubernetes: every manifest parses; kustomization.yaml lists every manifest and only
  existing files; selectors match pod labels; Service ports target container ports (by name or
  number); gRPC probes point at the coordinator's gRPC port; the StatefulSet's volume holds its
  --work_dir; every --flag in a container's args is one the binary accepts (its --help), every
  $(VAR) in args is defined in env; the workers' and trainers' coordinator address is the
  coordinator Service's DNS name and port; the trainer Job's cluster spec is valid JSON naming
  as many trainers as the Job runs.
- deploy/systemd: each ExecStart's flags exist in the binary's --help.
- deploy/container/Dockerfile: Debian 12 base, every COPY source exists, the binaries it copies
  are the three Sluice binaries, EXPOSE covers the manifests' ports, CMD's flags exist.
- deploy/slurm: the scripts pass `bash -n`, and the flags they give the binaries exist.
- Data roots: every coordinator and worker the manifests, units and the Slurm script start is
  given --data_root explicitly (without it a server reads any local file); in Kubernetes each
  local root is a mounted volume.

Needs PyYAML (Debian: python3-yaml) and the binaries in $SLUICE_BUILD_DIR/bin; exits 77 (CTest
skip) without PyYAML.
"""
import glob
import json
import os
import re
import subprocess
import sys

try:
    import yaml
except ImportError:
    print("SKIP: PyYAML is not installed (Debian: apt-get install python3-yaml)")
    sys.exit(77)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("SLUICE_BUILD_DIR", os.path.join(REPO, "build"))
BIN = os.path.join(BUILD, "bin")
K8S = os.path.join(REPO, "deploy", "kubernetes")
BINARIES = ("sluice-coordinator", "sluice-worker", "sluicectl")

failures = []


def check(cond, message):
    if not cond:
        failures.append(message)
    return cond


# --- the flags each binary accepts ------------------------------------------------------------

_flag_cache = {}


def accepted_flags(binary, subcommand=None):
    """The --flag names in the binary's help (sluicectl: `sluicectl help SUBCOMMAND`)."""
    key = (binary, subcommand)
    if key in _flag_cache:
        return _flag_cache[key]
    path = os.path.join(BIN, binary)
    if not os.access(path, os.X_OK):
        sys.exit(f"FAIL: {path} not built (build sluice-coordinator sluice-worker sluicectl)")
    argv = [path, "help", subcommand] if subcommand else [path, "--helpfull"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    text = out.stdout + out.stderr
    # absl's --helpfull and `sluicectl help CMD` list each flag on a line "  --name (...".
    flags = set(re.findall(r"^\s+--([A-Za-z_][A-Za-z0-9_]*) \(", text, re.M))
    if binary == "sluicectl":
        flags |= {"plugin", "cluster_spec"}  # global flags
    check(flags, f"{' '.join(argv)} printed no flags")
    _flag_cache[key] = flags
    return flags


def flag_names(args):
    """Names of the --name[=value] arguments."""
    names = []
    for a in args:
        m = re.match(r"^--?([A-Za-z_][A-Za-z0-9_]*)(=|$)", a)
        if m:
            names.append(m.group(1))
    return names


def check_flags(where, binary, args, subcommand=None):
    flags = accepted_flags(binary, subcommand)
    for name in flag_names(args):
        check(name in flags, f"{where}: {binary}{' ' + subcommand if subcommand else ''} "
                             f"has no flag --{name}")


def binary_of(command):
    base = os.path.basename(command)
    return base if base in BINARIES else None


# --- Kubernetes -------------------------------------------------------------------------------

def load_manifests():
    docs = {}  # file name -> list of objects
    for path in sorted(glob.glob(os.path.join(K8S, "*.yaml")) + glob.glob(os.path.join(K8S, "*.yml"))):
        name = os.path.basename(path)
        try:
            with open(path) as f:
                docs[name] = [d for d in yaml.safe_load_all(f) if d is not None]
        except yaml.YAMLError as e:
            check(False, f"{name}: not valid YAML: {e}")
            docs[name] = []
    return docs


def pod_template(obj):
    kind = obj.get("kind")
    if kind in ("Deployment", "StatefulSet", "Job", "DaemonSet", "ReplicaSet"):
        return obj["spec"]["template"]
    return None


def containers(obj):
    t = pod_template(obj)
    return t["spec"].get("containers", []) if t else []


def container_ports(obj):
    ports = {}
    for c in containers(obj):
        for p in c.get("ports", []):
            ports[p["containerPort"]] = p
            if "name" in p:
                ports[p["name"]] = p
    return ports


def port_number(obj, port):
    """A probe's or targetPort's port (a name or number) as a number, or None."""
    p = container_ports(obj).get(port)
    return p["containerPort"] if p else None


def labels_match(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_kubernetes():
    docs = load_manifests()
    check("kustomization.yaml" in docs, "deploy/kubernetes/kustomization.yaml is missing")
    kust = docs.pop("kustomization.yaml", [{}])[0]
    namespace = kust.get("namespace", "default")
    resources = kust.get("resources", [])
    for r in resources:
        check(os.path.isfile(os.path.join(K8S, r)), f"kustomization.yaml lists {r}, which does not exist")
    for name in docs:
        check(name in resources, f"kustomization.yaml does not list {name}")
    check(len(resources) == len(set(resources)), "kustomization.yaml lists a file twice")

    objects = [o for name in sorted(docs) for o in docs[name]]
    for o in objects:
        check("apiVersion" in o and "kind" in o and "name" in o.get("metadata", {}),
              f"an object without apiVersion/kind/metadata.name: {str(o)[:80]}")
    by_kind = {}
    for o in objects:
        by_kind.setdefault(o["kind"], []).append(o)
    workloads = [o for o in objects if pod_template(o) is not None]
    services = by_kind.get("Service", [])

    # Selectors match their own pod template.
    for w in workloads:
        name = f"{w['kind']}/{w['metadata']['name']}"
        labels = pod_template(w)["metadata"].get("labels", {})
        sel = w["spec"].get("selector", {}).get("matchLabels")
        if w["kind"] != "Job":
            check(labels_match(sel, labels), f"{name}: selector {sel} does not match pod labels {labels}")
        for c in containers(w):
            check(c.get("resources", {}).get("requests"), f"{name}: container {c['name']} has no resource requests")
            check(c.get("image"), f"{name}: container {c['name']} has no image")

    # Every Service selects a workload and targets its container ports.
    def selected(svc):
        sel = svc["spec"].get("selector", {})
        return [w for w in workloads if labels_match(sel, pod_template(w)["metadata"].get("labels", {}))]

    for svc in services:
        name = f"Service/{svc['metadata']['name']}"
        targets = selected(svc)
        if not check(targets, f"{name}: selector {svc['spec'].get('selector')} matches no workload"):
            continue
        for p in svc["spec"].get("ports", []):
            target = p.get("targetPort", p["port"])
            for w in targets:
                check(port_number(w, target) is not None,
                      f"{name}: port {p['port']} targets {target!r}, which "
                      f"{w['kind']}/{w['metadata']['name']} does not expose")

    # The coordinator: StatefulSet, headless serviceName, gRPC probes, volume for --work_dir.
    coords = [w for w in by_kind.get("StatefulSet", [])
              if any(binary_of(c.get("command", [""])[0]) == "sluice-coordinator" for c in containers(w))]
    if check(len(coords) == 1, "expected exactly one StatefulSet running sluice-coordinator"):
        sts = coords[0]
        check(sts["spec"].get("replicas", 1) == 1, "the coordinator StatefulSet must have 1 replica")
        headless = [s for s in services if s["metadata"]["name"] == sts["spec"].get("serviceName")]
        check(headless and headless[0]["spec"].get("clusterIP") == "None",
              f"StatefulSet serviceName {sts['spec'].get('serviceName')!r} is not a headless Service")
        c = containers(sts)[0]
        args = c.get("args", [])
        port_arg = [a.split("=", 1)[1] for a in args if a.startswith("--port=")]
        grpc_port = port_number(sts, "grpc")
        check(port_arg and grpc_port is not None and int(port_arg[0]) == grpc_port,
              f"coordinator --port {port_arg} is not its container port 'grpc' ({grpc_port})")
        for probe in ("readinessProbe", "livenessProbe"):
            p = c.get(probe, {})
            check("grpc" in p, f"coordinator {probe} is not a gRPC (grpc.health.v1) probe")
            if "grpc" in p:
                check(port_number(sts, p["grpc"]["port"]) == grpc_port,
                      f"coordinator {probe} checks port {p['grpc']['port']}, not the gRPC port {grpc_port}")
        work_dir = [a.split("=", 1)[1] for a in args if a.startswith("--work_dir=")]
        claims = {t["metadata"]["name"] for t in sts["spec"].get("volumeClaimTemplates", [])}
        check(claims, "the coordinator StatefulSet has no volumeClaimTemplates")
        if check(work_dir, "the coordinator has no --work_dir"):
            mounts = [m for m in c.get("volumeMounts", []) if m["name"] in claims]
            check(any(work_dir[0] == m["mountPath"] or work_dir[0].startswith(m["mountPath"].rstrip("/") + "/")
                      for m in mounts),
                  f"--work_dir={work_dir[0]} is not on a volume from volumeClaimTemplates {claims}")

    # The coordinator's Service DNS names.
    coord_addresses = set()
    for svc in services:
        if svc["spec"].get("clusterIP") == "None":
            continue
        if not any(w in coords for w in selected(svc)):
            continue
        n = svc["metadata"]["name"]
        for p in svc["spec"]["ports"]:
            for host in (n, f"{n}.{namespace}", f"{n}.{namespace}.svc", f"{n}.{namespace}.svc.cluster.local"):
                coord_addresses.add(f"{host}:{p['port']}")
    check(coord_addresses, "no ClusterIP Service selects the coordinator")

    # Every container: flags exist, $(VAR)s are defined, coordinator addresses resolve.
    for w in workloads:
        for c in containers(w):
            where = f"{w['kind']}/{w['metadata']['name']} container {c['name']}"
            command = c.get("command", [])
            binary = binary_of(command[0]) if command else None
            args = c.get("args", [])
            env = {e["name"]: e for e in c.get("env", [])}
            for a in args:
                for var in re.findall(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", a):
                    check(var in env, f"{where}: args use $({var}), which env does not define")
            if binary == "sluicectl":
                check(args, f"{where}: sluicectl without a subcommand")
                check_flags(where, binary, args[1:], subcommand=args[0])
            elif binary:
                check_flags(where, binary, args)
            for a in args:
                if a.startswith("--coordinator="):
                    check(a.split("=", 1)[1] in coord_addresses,
                          f"{where}: {a} is not the coordinator Service (one of {sorted(coord_addresses)})")
            if binary == "sluice-worker":
                check("--host=$(POD_IP)" in args, f"{where}: workers must advertise --host=$(POD_IP)")
                fr = env.get("POD_IP", {}).get("valueFrom", {}).get("fieldRef", {})
                check(fr.get("fieldPath") == "status.podIP", f"{where}: POD_IP must come from status.podIP")
                port = [a.split("=", 1)[1] for a in args if a.startswith("--port=")]
                check(port and port_number(w, int(port[0])) is not None,
                      f"{where}: --port {port} is not a container port")
            # A cluster spec in the environment: valid JSON naming the coordinator Service.
            for var in ("SLUICE_CLUSTER", "TF_CONFIG"):
                if var not in env:
                    continue
                text = re.sub(r"\$\([A-Za-z_][A-Za-z0-9_]*\)", "0", env[var].get("value", ""))
                try:
                    spec = json.loads(text)
                except ValueError as e:
                    check(False, f"{where}: {var} is not JSON: {e}")
                    continue
                cl = spec.get("cluster", {})
                coord = cl.get("coordinator", [])
                coord = [coord] if isinstance(coord, str) else coord
                check(len(coord) == 1 and coord[0] in coord_addresses,
                      f"{where}: {var} cluster.coordinator {coord} is not the coordinator Service")
                if w["kind"] == "Job":
                    trainers = cl.get("trainer", [])
                    check(len(trainers) == w["spec"].get("completions") == w["spec"].get("parallelism"),
                          f"{where}: {var} names {len(trainers)} trainers; the Job runs "
                          f"completions={w['spec'].get('completions')}, parallelism={w['spec'].get('parallelism')}")
                    check(w["spec"].get("completionMode") == "Indexed",
                          f"{where}: the trainer Job must be Indexed (task.index from the completion index)")

            if binary in ("sluice-worker", "sluice-coordinator"):
                check_k8s_data_root(where, c, args)

    workers = [w for w in workloads if any(binary_of((c.get("command") or [""])[0]) == "sluice-worker"
                                           for c in containers(w))]
    check(any(w["kind"] == "Deployment" for w in workers), "no Deployment runs sluice-worker")
    return docs


def check_k8s_data_root(where, container, args):
    roots = [a.split("=", 1)[1] for a in args if a.startswith("--data_root=")]
    if not check(roots and roots[0], f"{where}: no --data_root (the server would read any local file)"):
        return
    mounts = [m["mountPath"].rstrip("/") for m in container.get("volumeMounts", [])]
    for root in roots[0].split(","):
        if "://" in root:
            continue
        check(any(root == m or root.startswith(m + "/") for m in mounts),
              f"{where}: --data_root {root} is not on a mounted volume ({mounts})")


# --- systemd ----------------------------------------------------------------------------------

def duration_seconds(text):
    """'30s', '5m', '1h' -> seconds; None if it is none of these."""
    m = re.fullmatch(r"(\d+)(s|m|h)", text or "")
    return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600}[m.group(2)] if m else None


def flag_value(args, name):
    for a in args:
        if isinstance(a, str) and a.startswith(f"--{name}="):
            return a.split("=", 1)[1]
    return None


def check_autoscaling(docs):
    """worker-hpa.yaml follows the coordinator's desired-workers metric (docs/AUTOSCALING.md):
    it scales the workers' Deployment; its metric is one the coordinator exports and the one the
    Prometheus adapter rules serve; its bounds are the coordinator's --min_workers/--max_workers;
    the coordinator exposes --metrics_port as a container port Prometheus is told to scrape; a
    worker's grace period covers its --drain_timeout (the SIGTERM drain of a scale-in)."""
    objects = [o for name in sorted(docs) for o in docs[name]]
    hpas = [o for o in objects if o.get("kind") == "HorizontalPodAutoscaler"]
    if not check(len(hpas) == 1, "deploy/kubernetes: expected one HorizontalPodAutoscaler"):
        return
    hpa = hpas[0]
    spec = hpa.get("spec", {})
    target = spec.get("scaleTargetRef", {})
    workers = [o for o in objects if o.get("kind") == "Deployment"
               and any(binary_of((c.get("command") or [""])[0]) == "sluice-worker" for c in containers(o))]
    check(any(target.get("kind") == "Deployment" and target.get("name") == w["metadata"]["name"]
              for w in workers),
          f"the HPA scales {target}, not the sluice-worker Deployment")
    metrics = [m.get("external", {}).get("metric", {}).get("name") for m in spec.get("metrics", [])
               if m.get("type") == "External"]
    check(metrics == ["sluice_coordinator_desired_workers"],
          f"the HPA must follow the external metric sluice_coordinator_desired_workers, got {metrics}")
    with open(os.path.join(REPO, "server", "coordinator_metrics.cc")) as f:
        exported = f.read()
    for m in metrics:
        check(f'"{m}"' in exported, f"the coordinator does not export {m} (server/coordinator_metrics.cc)")
    for m in spec.get("metrics", []):
        t = m.get("external", {}).get("target", {})
        check(t.get("type") == "AverageValue" and str(t.get("averageValue")) == "1",
              "the HPA's target must be averageValue 1 (replicas = desired workers)")
    with open(os.path.join(K8S, "prometheus-adapter", "rules.yaml")) as f:
        adapter = list(yaml.safe_load_all(f))
    config = yaml.safe_load(adapter[0]["data"]["config.yaml"])
    served = [r.get("name", {}).get("as") for r in config.get("externalRules", [])]
    for m in metrics:
        check(m in served, f"the Prometheus adapter rules do not serve {m} (served: {served})")
    coords = [o for o in objects if o.get("kind") == "StatefulSet"]
    for c_obj in coords:
        for c in containers(c_obj):
            if binary_of((c.get("command") or [""])[0]) != "sluice-coordinator":
                continue
            args = c.get("args", [])
            check(str(spec.get("minReplicas")) == flag_value(args, "min_workers"),
                  "the HPA's minReplicas differs from the coordinator's --min_workers")
            check(str(spec.get("maxReplicas")) == flag_value(args, "max_workers"),
                  "the HPA's maxReplicas differs from the coordinator's --max_workers")
            port = flag_value(args, "metrics_port")
            check(port is not None and any(str(p.get("containerPort")) == port
                                           for p in c.get("ports", [])),
                  "the coordinator's --metrics_port is not one of its container ports")
            annotations = pod_template(c_obj).get("metadata", {}).get("annotations", {})
            check(annotations.get("prometheus.io/port") == port,
                  "the coordinator pod's prometheus.io/port annotation is not its --metrics_port")
    for w in workers:
        grace = pod_template(w).get("spec", {}).get("terminationGracePeriodSeconds", 30)
        for c in containers(w):
            drain = duration_seconds(flag_value(c.get("args", []), "drain_timeout") or "30s")
            check(drain is not None and grace > drain,
                  f"the workers' grace period ({grace}s) must exceed --drain_timeout ({drain}s)")


def check_systemd():
    units = sorted(glob.glob(os.path.join(REPO, "deploy", "systemd", "*.service")))
    check(units, "deploy/systemd has no .service units")
    for path in units:
        name = os.path.basename(path)
        text = open(path).read().replace("\\\n", " ")
        execs = re.findall(r"^ExecStart=(.*)$", text, re.M)
        if not check(len(execs) == 1, f"{name}: expected one ExecStart, found {len(execs)}"):
            continue
        words = execs[0].split()
        binary = binary_of(words[0])
        if check(binary, f"{name}: ExecStart runs {words[0]}, not a Sluice binary"):
            check_flags(name, binary, words[1:])
            check(any(w.startswith("--data_root=") for w in words[1:]),
                  f"{name}: ExecStart gives no --data_root")
        check(re.search(r"^KillSignal=SIGTERM$", text, re.M), f"{name}: KillSignal should be SIGTERM")
        check(re.search(r"^User=", text, re.M), f"{name}: runs as root (no User=)")


# --- Dockerfile -------------------------------------------------------------------------------

def check_dockerfile(k8s_ports):
    path = os.path.join(REPO, "deploy", "container", "Dockerfile")
    if not check(os.path.isfile(path), "deploy/container/Dockerfile is missing"):
        return
    lines = open(path).read().replace("\\\n", " ").splitlines()
    instrs = [l.strip() for l in lines if l.strip() and not l.strip().startswith("#")]
    froms = [l.split()[1] for l in instrs if l.upper().startswith("FROM ")]
    check(len(froms) >= 2 and all(f == "debian:12" for f in froms),
          f"Dockerfile: want a multi-stage build on debian:12, FROM {froms}")
    copied_binaries = set()
    for l in instrs:
        if not l.upper().startswith("COPY "):
            continue
        words = l.split()[1:]
        from_stage = any(w.startswith("--from=") for w in words)
        srcs = [w for w in words if not w.startswith("--")][:-1]
        for s in srcs:
            if from_stage:
                copied_binaries.add(os.path.basename(s))
            else:
                check(os.path.exists(os.path.join(REPO, s)), f"Dockerfile: COPY source {s} does not exist")
    check(copied_binaries == set(BINARIES),
          f"Dockerfile: the runtime stage copies {sorted(copied_binaries)}, want {sorted(BINARIES)}")
    check(any(l.upper().startswith("USER ") and l.split()[1] not in ("root", "0") for l in instrs),
          "Dockerfile: the runtime stage must run as a non-root USER")
    exposed = {int(p.split("/")[0]) for l in instrs if l.upper().startswith("EXPOSE ") for p in l.split()[1:]}
    for p in k8s_ports:
        check(p in exposed, f"Dockerfile: EXPOSE {sorted(exposed)} misses port {p} the manifests use")
    cmd = [l for l in instrs if l.upper().startswith("CMD ")]
    if cmd:
        argv = json.loads(cmd[-1][4:])
        if binary_of(argv[0]):
            check_flags("Dockerfile CMD", binary_of(argv[0]), argv[1:])
    # The image installs what scripts/deps.sh lists, so the packages there must exist in Debian.
    check(os.path.isfile(os.path.join(REPO, "scripts", "deps.sh")), "scripts/deps.sh is missing")


# --- Slurm ------------------------------------------------------------------------------------

def check_slurm():
    for path in [os.path.join(REPO, "deploy", "slurm", "sluice.sbatch"),
                 os.path.join(REPO, "tests", "deploy", "slurm_e2e_test.sh")]:
        r = subprocess.run(["bash", "-n", path], capture_output=True, text=True, timeout=30)
        check(r.returncode == 0, f"{os.path.relpath(path, REPO)}: bash -n: {r.stderr.strip()}")
    text = open(os.path.join(REPO, "deploy", "slurm", "sluice.sbatch")).read().replace("\\\n", " ")
    for binary in BINARIES:
        for m in re.finditer(r"/" + re.escape(binary) + r'"?((?:\s+--?[A-Za-z_]\S*)+)', text):
            args = [a.strip('"') for a in m.group(1).split()]
            if binary == "sluicectl":
                continue  # its flags depend on the subcommand; the e2e test runs them
            check_flags("deploy/slurm/sluice.sbatch", binary, args)
    for binary in ("sluice-coordinator", "sluice-worker"):
        started = re.findall(r"/" + re.escape(binary) + r'"\s[^&]*&', text)
        check(started and all("--data_root" in cmd or "COORD_ARGS" in cmd for cmd in started),
              f"sluice.sbatch starts {binary} without --data_root")
    check(re.search(r'COORD_ARGS=\([^)]*--data_root', text),
          "sluice.sbatch: the coordinator's COORD_ARGS have no --data_root")
    check("SLURM_PROCID" in text or "srun" in text, "sluice.sbatch does not start trainers with srun")


def main():
    docs = check_kubernetes()
    ports = set()
    for objs in docs.values():
        for o in objs:
            if pod_template(o) is not None and o["kind"] != "Job":
                for c in containers(o):
                    ports |= {p["containerPort"] for p in c.get("ports", [])}
    check_autoscaling(docs)
    check_systemd()
    check_dockerfile(ports)
    check_slurm()
    if failures:
        for f in failures:
            print(f"FAIL: {f}")
        print(f"{len(failures)} check(s) failed")
        return 1
    print("PASS: deploy/kubernetes, deploy/systemd, deploy/container and deploy/slurm agree with "
          "each other and with the binaries' flags")
    return 0


if __name__ == "__main__":
    sys.exit(main())
