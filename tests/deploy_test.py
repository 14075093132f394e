#!/usr/bin/env python3
"""Deployment checks (CTest: deploy_manifests_test, deploy_config_test, client_health_test).

  deploy_test.py --server BIN --client BIN [--source-dir DIR] [unittest args, e.g. ClassName]

- KubernetesManifests (needs PyYAML; exit 77 = skipped without it): renders
  docker/k8s/overlays/{gpu,cpu} (a small kustomize for the features used here: resources,
  images, JSON6902 patches, configMapGenerator; and with `kubectl kustomize` too where kubectl
  exists) and checks the objects: probes are gRPC health probes on the gRPC port, the drain
  fits terminationGracePeriodSeconds, security context, resources (nvidia.com/gpu on the GPU
  overlay), Prometheus annotations = the metrics port, Services and the PDB select the pods, the
  Envoy config points at the headless Service with HTTP/2, a balancing policy and gRPC health
  checks; and that every --flag the manifests pass exists in `jasper-server --help` and is
  accepted (names and values) by the built server.
- ConfigExamples: config/*.flags are accepted by the server (as --flagfile); server.flags lists
  every flag of `jasper-server --help` with its default.
- ClientHealth: `jasper-client --health` exits 0 against a serving server, 1 for an unknown
  service, 1 when nothing listens, 1 after SIGTERM (NOT_SERVING or gone).
"""
import argparse
import copy
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

try:
    import yaml
except ImportError:  # python3-yaml (tools/install_deps.sh installs it)
    yaml = None

ARGS = None


# The binaries may be a sanitizer build (tools/test.sh's ASan stage runs this suite too): leaks
# are the GoogleTest suites' business; here an exit must not turn into a leak report.
QUIET_ENV = dict(os.environ, ASAN_OPTIONS=":".join(
    o for o in (os.environ.get("ASAN_OPTIONS"), "detect_leaks=0") if o))


def help_flags(binary):
    """{flag: default as printed} from `BINARY --help` (Abseil's format)."""
    text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60,
                          env=QUIET_ENV).stdout
    return {m.group(1): m.group(3).strip() for m in re.finditer(
        r"^\s{4}--(\w+) \((.*?)\);\s+default: (.*?);$", text, re.M | re.S)}


def accepts(binary, args):
    """(ok, errors): BINARY parses args (names and values), then exits on --version."""
    r = subprocess.run([binary, *args, "--version"], capture_output=True, text=True, timeout=60,
                       env=QUIET_ENV)
    return r.returncode == 0, [l for l in (r.stdout + r.stderr).splitlines() if l.startswith("ERROR")]


def port_of(address):
    return int(str(address).rsplit(":", 1)[1])


def args_dict(args):
    out = {}
    for a in args:
        m = re.match(r"--(\w+)(?:=(.*))?$", a)
        if m:
            out[m.group(1)] = m.group(2)
    return out


# --------------------------------------------------------------------------- kustomize
class MiniKustomize:
    """The kustomize features these manifests use; anything else is an error, so a manifest
    change that needs more shows up here rather than silently passing."""

    SUPPORTED = {"apiVersion", "kind", "resources", "images", "patches", "configMapGenerator"}

    def render(self, directory):
        with open(os.path.join(directory, "kustomization.yaml"), encoding="utf-8") as f:
            k = yaml.safe_load(f)
        unknown = set(k) - self.SUPPORTED
        if unknown:
            raise AssertionError(f"{directory}: kustomization fields not handled by this test: {unknown}")
        objects = []
        for res in k.get("resources", []):
            path = os.path.normpath(os.path.join(directory, res))
            if os.path.isdir(path):
                objects += self.render(path)
            else:
                with open(path, encoding="utf-8") as f:
                    objects += [d for d in yaml.safe_load_all(f) if d]
        for gen in k.get("configMapGenerator", []):
            data = {}
            for name in gen.get("files", []):
                with open(os.path.join(directory, name), encoding="utf-8") as f:
                    data[os.path.basename(name)] = f.read()
            objects.append({"apiVersion": "v1", "kind": "ConfigMap",
                            "metadata": {"name": gen["name"]}, "data": data})
        for patch in k.get("patches", []):
            target = patch["target"]
            ops = yaml.safe_load(patch["patch"])
            matched = [o for o in objects if o["kind"] == target["kind"] and
                       o["metadata"]["name"] == target["name"]]
            if len(matched) != 1:
                raise AssertionError(f"{directory}: patch target {target} matches {len(matched)} objects")
            for op in ops:
                self.apply(matched[0], op)
        for image in k.get("images", []):
            for o in objects:
                for c in self.containers(o):
                    if c["image"].split(":")[0] == image["name"]:
                        c["image"] = f'{image.get("newName", image["name"])}:{image.get("newTag", "latest")}'
        return objects

    @staticmethod
    def containers(o):
        return o.get("spec", {}).get("template", {}).get("spec", {}).get("containers", [])

    @staticmethod
    def apply(obj, op):
        parts = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        node = obj
        for p in parts[:-1]:
            node = node[int(p)] if isinstance(node, list) else node[p]
        last = parts[-1]
        if op["op"] == "add":
            if isinstance(node, list):
                node.append(op["value"]) if last == "-" else node.insert(int(last), op["value"])
            else:
                node[last] = op["value"]
        elif op["op"] == "replace":
            if isinstance(node, list):
                node[int(last)] = op["value"]
            else:
                if last not in node:
                    raise AssertionError(f"replace of missing {op['path']}")
                node[last] = op["value"]
        else:
            raise AssertionError(f"JSON patch op {op['op']} not handled by this test")


def kubectl_render(directory):
    kubectl = shutil.which("kubectl")
    if not kubectl:
        return None
    r = subprocess.run([kubectl, "kustomize", directory], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        raise AssertionError(f"kubectl kustomize {directory} failed: {r.stderr}")
    return [d for d in yaml.safe_load_all(r.stdout) if d]


def find(objects, kind, name=None, prefix=False):
    out = [o for o in objects if o["kind"] == kind and (
        name is None or o["metadata"]["name"] == name or
        (prefix and o["metadata"]["name"].startswith(name)))]
    return out


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def per_overlay(test):
    """Runs `test(self, overlay, objects)` once per overlay and renderer, as subtests."""
    def run(self):
        for overlay, renders in self.rendered.items():
            for how, objects in renders:
                with self.subTest(overlay=overlay, renderer=how):
                    test(self, overlay, copy.deepcopy(objects))
    run.__name__ = test.__name__
    run.__doc__ = test.__doc__
    return run


@unittest.skipIf(yaml is None, "PyYAML (python3-yaml) is not installed")
class KubernetesManifests(unittest.TestCase):
    OVERLAYS = ("gpu", "cpu")

    @classmethod
    def setUpClass(cls):
        cls.k8s = os.path.join(ARGS.source_dir, "docker", "k8s")
        cls.help = help_flags(ARGS.server)
        cls.rendered = {}
        for overlay in cls.OVERLAYS:
            path = os.path.join(cls.k8s, "overlays", overlay)
            cls.rendered[overlay] = [("mini-kustomize", MiniKustomize().render(path))]
            real = kubectl_render(path)
            if real is not None:
                cls.rendered[overlay].append(("kubectl kustomize", real))


    def server_parts(self, objects):
        deps = find(objects, "Deployment", "jasper-serve")
        self.assertEqual(len(deps), 1, "one Deployment jasper-serve")
        dep = deps[0]
        containers = dep["spec"]["template"]["spec"]["containers"]
        self.assertEqual(len(containers), 1)
        return dep, dep["spec"]["template"]["spec"], containers[0]

    def test_every_yaml_parses(self):
        for root, _, names in os.walk(self.k8s):
            for n in names:
                if n.endswith((".yaml", ".yml")):
                    with open(os.path.join(root, n), encoding="utf-8") as f:
                        docs = [d for d in yaml.safe_load_all(f) if d]
                    self.assertTrue(docs, n)

    @per_overlay
    def test_server_flags_exist_and_parse(self, overlay, objects):
        _, _, c = self.server_parts(objects)
        self.assertNotIn("command", c, "the image's ENTRYPOINT (jasper-server) runs; args only")
        for a in c["args"]:
            m = re.match(r"--(\w+)=", a)
            self.assertIsNotNone(m, f"argument {a!r} is --flag=value")
            self.assertIn(m.group(1), self.help, f"--{m.group(1)} ({overlay}) is not in jasper-server --help")
        ok, errors = accepts(ARGS.server, c["args"])
        self.assertTrue(ok, f"{overlay}: jasper-server rejects the manifest's args: {errors}")

    @per_overlay
    def test_probes_are_grpc_health_on_the_grpc_port(self, overlay, objects):
        _, spec, c = self.server_parts(objects)
        flags = args_dict(c["args"])
        grpc_port = port_of(flags["listen"])
        self.assertTrue(flags["listen"].startswith("0.0.0.0:"))
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.assertEqual(ports["grpc"], grpc_port)
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            self.assertIn(probe, c)
            self.assertIn("grpc", c[probe], f"{probe} is a native gRPC health probe")
            self.assertEqual(c[probe]["grpc"]["port"], grpc_port, probe)
            self.assertIsInstance(c[probe]["grpc"]["port"], int, "gRPC probes take a port number")
            self.assertEqual(c[probe]["grpc"].get("service", ""), "", "service '' = the whole server")

    @per_overlay
    def test_drain_fits_the_grace_period(self, overlay, objects):
        _, spec, c = self.server_parts(objects)
        flags = args_dict(c["args"])
        grace_s = int(flags.get("shutdown_grace_ms", self.help["shutdown_grace_ms"])) / 1000
        pre_stop = c["lifecycle"]["preStop"]
        if "sleep" in pre_stop:
            sleep_s = pre_stop["sleep"]["seconds"]
        else:
            cmd = pre_stop["exec"]["command"]
            self.assertEqual(os.path.basename(cmd[0]), "sleep")
            sleep_s = float(cmd[-1])
        total = spec["terminationGracePeriodSeconds"]
        self.assertGreaterEqual(total, sleep_s + grace_s + 5,
                                "terminationGracePeriodSeconds >= preStop + --shutdown_grace_ms + 5 s margin")
        live = c["livenessProbe"]
        self.assertGreaterEqual(live["periodSeconds"] * live["failureThreshold"], total,
                                "a drain (NOT_SERVING) must not trip the liveness probe")

    @per_overlay
    def test_security_context(self, overlay, objects):
        _, spec, c = self.server_parts(objects)
        pod = spec["securityContext"]
        self.assertTrue(pod["runAsNonRoot"])
        self.assertEqual(pod["runAsUser"], 10001, "= the images' USER")
        self.assertEqual(pod["seccompProfile"]["type"], "RuntimeDefault")
        sc = c["securityContext"]
        self.assertTrue(sc["readOnlyRootFilesystem"])
        self.assertFalse(sc["allowPrivilegeEscalation"])
        self.assertEqual(sc["capabilities"]["drop"], ["ALL"])
        mounts = {m["mountPath"] for m in c.get("volumeMounts", [])}
        self.assertIn("/tmp", mounts, "a writable /tmp beside the read-only root")

    @per_overlay
    def test_resources(self, overlay, objects):
        _, spec, c = self.server_parts(objects)
        res = c["resources"]
        self.assertIn("cpu", res["requests"])
        self.assertIn("memory", res["requests"])
        self.assertIn("memory", res["limits"])
        flags = args_dict(c["args"])
        if overlay == "gpu":
            self.assertEqual(str(res["limits"]["nvidia.com/gpu"]), "1")
            self.assertEqual(flags.get("device"), "cuda")
            self.assertTrue(any(t.get("key") == "nvidia.com/gpu" for t in spec.get("tolerations", [])))
            self.assertTrue(c["image"].endswith(":gpu"))
        else:
            self.assertNotIn("nvidia.com/gpu", res["limits"])
            self.assertEqual(flags.get("device"), "cpu")
            self.assertTrue(c["image"].endswith(":cpu"))
            cpus = int(str(res["limits"]["cpu"]))
            self.assertEqual(int(flags["num_workers"]) * int(flags["cpu_threads"]), cpus,
                             "num_workers x cpu_threads = the CPU limit")

    @per_overlay
    def test_prometheus_annotations_match_the_metrics_port(self, overlay, objects):
        dep, spec, c = self.server_parts(objects)
        flags = args_dict(c["args"])
        self.assertIn("metrics_address", flags)
        port = port_of(flags["metrics_address"])
        self.assertTrue(flags["metrics_address"].startswith("0.0.0.0:"))
        ann = dep["spec"]["template"]["metadata"]["annotations"]
        self.assertEqual(ann["prometheus.io/scrape"], "true")
        self.assertEqual(int(ann["prometheus.io/port"]), port)
        self.assertEqual(ann["prometheus.io/path"], "/metrics")
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        self.assertEqual(ports["metrics"], port)

    @per_overlay
    def test_services_and_pdb_select_the_pods(self, overlay, objects):
        dep, spec, c = self.server_parts(objects)
        labels = dep["spec"]["template"]["metadata"]["labels"]
        self.assertTrue(selects(dep["spec"]["selector"]["matchLabels"], labels))
        headless = find(objects, "Service", "jasper-serve-headless")
        self.assertEqual(len(headless), 1)
        h = headless[0]["spec"]
        self.assertEqual(h["clusterIP"], "None", "headless: one DNS record per ready pod")
        self.assertFalse(h.get("publishNotReadyAddresses", False), "draining pods leave DNS")
        self.assertTrue(selects(h["selector"], labels))
        port_names = {p["name"] for p in c["ports"]}
        for p in h["ports"]:
            self.assertIn(p["targetPort"], port_names)
        pdbs = [p for p in find(objects, "PodDisruptionBudget")
                if selects(p["spec"]["selector"]["matchLabels"], labels)]
        self.assertEqual(len(pdbs), 1, "one PDB for the server pods")
        pdb = pdbs[0]["spec"]
        if "maxUnavailable" in pdb:
            self.assertGreaterEqual(int(pdb["maxUnavailable"]), 1, "a PDB that allows no eviction blocks node drains")
        else:
            self.assertLess(int(pdb["minAvailable"]), dep["spec"]["replicas"])
        # No ClusterIP Service in front of the server pods (L4 would pin a client to a pod).
        for svc in find(objects, "Service"):
            if svc["spec"].get("clusterIP") != "None":
                self.assertFalse(selects(svc["spec"]["selector"], labels),
                                 f"Service {svc['metadata']['name']} balances connections, not streams")

    @per_overlay
    def test_envoy_front_proxy(self, overlay, objects):
        dep, spec, c = self.server_parts(objects)
        grpc_port = port_of(args_dict(c["args"])["listen"])
        flags = args_dict(c["args"])
        max_streams = int(flags.get("max_concurrent_streams", self.help["max_concurrent_streams"]))
        envoys = find(objects, "Deployment", "jasper-serve-envoy")
        self.assertEqual(len(envoys), 1)
        espec = envoys[0]["spec"]["template"]["spec"]
        elabels = envoys[0]["spec"]["template"]["metadata"]["labels"]
        econtainer = espec["containers"][0]
        self.assertTrue(espec["securityContext"]["runAsNonRoot"])
        self.assertTrue(econtainer["securityContext"]["readOnlyRootFilesystem"])
        cm_name = next(v["configMap"]["name"] for v in espec["volumes"] if "configMap" in v)
        cms = find(objects, "ConfigMap", "jasper-serve-envoy", prefix=True)
        self.assertEqual(len(cms), 1)
        self.assertTrue(cm_name == cms[0]["metadata"]["name"], "the pods mount the generated ConfigMap")
        config = yaml.safe_load(cms[0]["data"]["envoy.yaml"])
        args = econtainer["args"]
        self.assertIn("/etc/envoy/envoy.yaml", args)
        # Every typed config names an Envoy v3 type.
        text = cms[0]["data"]["envoy.yaml"]
        for t in re.findall(r'"@type":\s*(\S+)', text):
            self.assertRegex(t, r"^type\.googleapis\.com/envoy\..*\.v3\.\w+$")
        clusters = {cl["name"]: cl for cl in config["static_resources"]["clusters"]}
        listeners = {l["name"]: l for l in config["static_resources"]["listeners"]}
        grpc_listener = listeners["grpc"]
        eports = {p["name"]: p["containerPort"] for p in econtainer["ports"]}
        self.assertEqual(grpc_listener["address"]["socket_address"]["port_value"], eports["grpc"])
        # The public Service selects the Envoy pods, on the listener's port.
        public = find(objects, "Service", "jasper-serve")
        self.assertEqual(len(public), 1)
        self.assertTrue(selects(public[0]["spec"]["selector"], elabels))
        self.assertFalse(selects(public[0]["spec"]["selector"], dep["spec"]["template"]["metadata"]["labels"]))
        self.assertEqual(public[0]["spec"]["ports"][0]["targetPort"], "grpc")
        # Routes: to a defined cluster, no route timeout (long streams).
        filters = grpc_listener["filter_chains"][0]["filters"]
        names = [f["name"] for f in filters]
        self.assertIn("envoy.filters.network.connection_limit", names)
        hcm = filters[names.index("envoy.filters.network.http_connection_manager")]["typed_config"]
        self.assertEqual(hcm["codec_type"], "HTTP2")
        self.assertIn("max_concurrent_streams", hcm["http2_protocol_options"])
        routes = [r for vh in hcm["route_config"]["virtual_hosts"] for r in vh["routes"]]
        for r in routes:
            self.assertIn(r["route"]["cluster"], clusters)
            self.assertEqual(r["route"]["timeout"], "0s", "Envoy's 15 s default would cut streams")
        self.assertEqual(hcm["http_filters"][-1]["name"], "envoy.filters.http.router")
        # The upstream: the headless Service, HTTP/2, a balancing policy, gRPC health checks.
        cl = clusters[routes[0]["route"]["cluster"]]
        self.assertEqual(cl["type"], "STRICT_DNS", "one host per A record of the headless Service")
        self.assertIn(cl["lb_policy"], ("LEAST_REQUEST", "ROUND_ROBIN"))
        addr = cl["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"]["socket_address"]
        self.assertEqual(addr["address"].split(".")[0], "jasper-serve-headless")
        self.assertEqual(addr["port_value"], grpc_port)
        proto = cl["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
        self.assertIn("http2_protocol_options", proto["explicit_http_config"])
        self.assertTrue(any("grpc_health_check" in hc for hc in cl["health_checks"]))
        replicas = dep["spec"]["replicas"]
        limit = cl["circuit_breakers"]["thresholds"][0]["max_requests"]
        self.assertGreaterEqual(limit, replicas * max_streams,
                                "circuit breaker below replicas x --max_concurrent_streams")
        # Admin only on loopback.
        self.assertEqual(config["admin"]["address"]["socket_address"]["address"], "127.0.0.1")


class ConfigExamples(unittest.TestCase):
    def setUp(self):
        self.config = os.path.join(ARGS.source_dir, "config")
        self.help = help_flags(ARGS.server)

    def flag_files(self):
        return sorted(os.path.join(self.config, f) for f in os.listdir(self.config) if f.endswith(".flags"))

    @staticmethod
    def read(path):
        flags = {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                m = re.match(r"--(\w+)=(.*)$", line)
                assert m, f"{path}: '{line}' is not --flag=value"
                flags[m.group(1)] = m.group(2)
        return flags

    def test_flag_files_are_accepted(self):
        self.assertTrue(self.flag_files())
        for path in self.flag_files():
            with self.subTest(path=os.path.basename(path)):
                for flag in self.read(path):
                    self.assertIn(flag, self.help, f"--{flag} is not in jasper-server --help")
                ok, errors = accepts(ARGS.server, [f"--flagfile={path}"])
                self.assertTrue(ok, errors)

    def test_server_flags_lists_every_flag_with_its_default(self):
        listed = self.read(os.path.join(self.config, "server.flags"))
        missing = sorted(set(self.help) - set(listed))
        self.assertFalse(missing, f"config/server.flags lacks {missing}")
        unknown = sorted(set(listed) - set(self.help))
        self.assertFalse(unknown, f"config/server.flags names flags jasper-server does not have: {unknown}")
        for flag, value in listed.items():
            default = self.help[flag].strip('"')
            self.assertEqual(value, default, f"--{flag}: server.flags says {value!r}, --help {default!r}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ClientHealth(unittest.TestCase):
    def health(self, port, *extra):
        return subprocess.run([ARGS.client, "--health", f"--server=127.0.0.1:{port}",
                               "--timeout_ms=2000", *extra], capture_output=True, text=True, timeout=30,
                              env=QUIET_ENV)

    def test_health_exit_codes(self):
        port = free_port()
        self.assertEqual(self.health(port).returncode, 1, "nothing listening: 1")
        model = os.path.join(ARGS.source_dir, "models", "quartznet_en_tts_small")
        log = tempfile.TemporaryFile(mode="w+")
        self.addCleanup(log.close)
        # Port 0: the server picks a free one and logs it (`free_port()` above only finds a port
        # with nothing listening; passing it on to a server could race with other tests).
        server = subprocess.Popen([ARGS.server, "--listen=127.0.0.1:0", f"--model_dir={model}",
                                   "--device=cpu", "--num_workers=1", "--cpu_threads=1"],
                                  stdout=log, stderr=subprocess.STDOUT, env=QUIET_ENV)
        try:
            deadline = time.time() + 120  # a sanitizer build loads and warms up slowly
            port = None
            while port is None and time.time() < deadline and server.poll() is None:
                time.sleep(0.1)
                log.seek(0)
                m = re.search(r"\(port (\d+)\)", log.read())
                port = int(m.group(1)) if m else None
            log.seek(0)
            self.assertIsNotNone(port, "the server did not log its port; log:\n" + log.read())
            r = self.health(port)
            while r.returncode != 0 and time.time() < deadline and server.poll() is None:
                time.sleep(0.2)
                r = self.health(port)
            log.seek(0)
            self.assertEqual(r.returncode, 0, r.stderr + "\nserver log:\n" + log.read())
            self.assertIn("SERVING", r.stdout)
            self.assertEqual(self.health(port, "--health_service=jasper.asr.v1.Asr").returncode, 0)
            self.assertEqual(self.health(port, "--health_service=nvidia.riva.asr.RivaSpeechRecognition").returncode, 0)
            r = self.health(port, "--health_service=no.such.Service")
            self.assertEqual(r.returncode, 1)
            self.assertIn("NOT_FOUND", r.stderr.upper().replace("SERVICE NAME UNKNOWN", "NOT_FOUND"))
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=30)
            self.assertEqual(server.returncode, 0)
            self.assertEqual(self.health(port).returncode, 1, "after SIGTERM: not healthy")
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()


def main():
    global ARGS
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    parser.add_argument("--client", required=True)
    parser.add_argument("--source-dir", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ARGS, rest = parser.parse_known_args()
    ARGS.source_dir = os.path.abspath(ARGS.source_dir)
    if yaml is None and "KubernetesManifests" in rest:
        print("SKIP: PyYAML (python3-yaml) is not installed")
        return 77
    program = unittest.main(argv=[sys.argv[0], "-v", *rest], exit=False)
    return 0 if program.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
