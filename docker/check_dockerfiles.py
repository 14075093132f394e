#!/usr/bin/env python3
"""Structural checks of docker/Dockerfile.{cpu,gpu}, run by CTest (dockerfiles_check) where no
container engine is available: every build runs them, so an image's build steps cannot drift
from the scripts and binaries CI builds.

  check_dockerfiles.py --source-dir DIR [--server BIN] [--client BIN] [Dockerfile ...]

Checked, per Dockerfile:
- multi-stage: a build stage and a final runtime stage; COPY --from names an earlier stage;
- every COPY source exists in the build context (the repository root) and is not excluded by
  the Dockerfile's own <Dockerfile>.dockerignore;
- every script a RUN calls exists and is executable (in the repository: COPY keeps the mode);
  the build stage runs tools/install_deps.sh and tools/build.sh (or tools/test.sh), the same
  scripts as the README and .ci/run; the runtime stage runs tools/install_deps.sh --runtime;
- the final stage: a numeric non-root USER; HEALTHCHECK calling `jasper-client --health` on
  the gRPC port; EXPOSE = the gRPC port (the server's default port) + the metrics port;
  ENTRYPOINT = jasper-server, a CMake target whose binary the build stage copies into the
  image; every CMD flag is accepted by the built server (names and values: `--version` after
  parsing them), every HEALTHCHECK flag by the built client;
- GPU Dockerfiles: CUDA built (JASPER_CUDA=ON) and the NVIDIA_* runtime variables set;
- the runtime packages (install_deps.sh --runtime) cover every shared library the built
  binaries load (ldd + dpkg; skipped where either is missing).
Exit status 0 when every check passes, 1 otherwise; one line per check.
"""
import argparse
import fnmatch
import json
import os
import re
import shlex
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from debian_packages import dpkg_closure, file_owners, installed_packages  # noqa: E402

FAILURES = []
PASSES = []


def check(ok, what):
    (PASSES if ok else FAILURES).append(what)
    print(("ok:   " if ok else "FAIL: ") + what)
    return ok


# ----------------------------------------------------------------------------- parsing
def parse_dockerfile(path):
    """[(line, INSTRUCTION, arguments)] with continuations joined and comments dropped."""
    out = []
    pending, start = "", 0
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for number, raw in enumerate(lines, 1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not pending):
            continue  # comments (also inside a continuation) and blank lines
        if not pending:
            start = number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        pending += stripped
        instr, _, args = pending.strip().partition(" ")
        out.append((start, instr.upper(), args.strip()))
        pending = ""
    if pending:
        instr, _, args = pending.strip().partition(" ")
        out.append((start, instr.upper(), args.strip()))
    return out


def substitute(text, env):
    def repl(m):
        name = m.group(1) or m.group(2)
        return env.get(name, m.group(0))
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", repl, text)


def split_flags(args):
    """Leading --flag=value options of COPY/HEALTHCHECK, and the rest."""
    flags = {}
    rest = args
    while rest.startswith("--"):
        token, _, rest = rest.partition(" ")
        key, _, value = token[2:].partition("=")
        flags[key] = value
        rest = rest.strip()
    return flags, rest


def exec_form(args):
    """The list of an exec-form (JSON) instruction, or None for the shell form."""
    args = args.strip()
    if not args.startswith("["):
        return None
    try:
        value = json.loads(args)
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, list) and all(isinstance(v, str) for v in value) else None


class Stage:
    def __init__(self, index, base, name):
        self.index, self.base, self.name = index, base, name
        self.instructions = []  # (line, INSTR, args)

    def all(self, instr):
        return [(n, a) for n, i, a in self.instructions if i == instr]


def stages_of(instructions):
    global_args, stages = {}, []
    for number, instr, args in instructions:
        if instr == "ARG" and not stages:
            name, _, default = args.partition("=")
            global_args[name.strip()] = default.strip().strip('"')
            continue
        if instr == "FROM":
            parts = [p for p in substitute(args, global_args).split() if not p.startswith("--")]
            name = parts[2] if len(parts) >= 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(len(stages), parts[0], name))
            continue
        if stages:
            stages[-1].instructions.append((number, instr, args))
    return stages, global_args


# ------------------------------------------------------------------------- dockerignore
def ignore_patterns(path):
    patterns = []
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line or line.startswith("#"):
                    continue
                negate = line.startswith("!")
                pattern = os.path.normpath(line[1:] if negate else line).lstrip("/")
                patterns.append((negate, pattern))
    return patterns


def pattern_regex(pattern):
    # Go filepath.Match plus "**" (any number of path elements), as BuildKit does.
    out, i = "", 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**", i):
            out += ".*"
            i += 2
            if i < len(pattern) and pattern[i] == "/":
                out = out[:-2] + "(.*/)?"
                i += 1
            continue
        out += {"*": "[^/]*", "?": "[^/]"}.get(c, re.escape(c))
        i += 1
    return re.compile("^" + out + "$")


def excluded(rel, patterns):
    """BuildKit's rule: the last pattern matching the path or one of its parents wins."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: k + 1]) for k in range(len(parts))]
    result = False
    for negate, pattern in patterns:
        rx = pattern_regex(pattern)
        if any(rx.match(p) for p in prefixes):
            result = not negate
    return result


def files_under(root, rel):
    """The files of `rel` (a file or a folder), lazily: callers stop at the first they need."""
    full = os.path.join(root, rel)
    if os.path.isfile(full):
        yield rel
        return
    for dirpath, _, names in os.walk(full):
        for n in names:
            yield os.path.relpath(os.path.join(dirpath, n), root)


# ------------------------------------------------------------------------- repository
def cmake_targets(source_dir):
    """{executable name: folder of the CMakeLists.txt that defines it}"""
    targets = {}
    for dirpath, dirs, names in os.walk(source_dir):
        rel = os.path.relpath(dirpath, source_dir)
        if rel.split(os.sep)[0].startswith(("build", ".git", "venv", ".venv")) or "/.work" in dirpath:
            dirs[:] = []
            continue
        if "CMakeLists.txt" in names:
            with open(os.path.join(dirpath, "CMakeLists.txt"), encoding="utf-8") as f:
                for m in re.finditer(r"add_executable\(\s*([\w.+-]+)", f.read()):
                    targets[m.group(1)] = "" if rel == "." else rel
    return targets


# The binaries may be a sanitizer build (tools/test.sh's ASan stage runs this suite too): their
# exit on --help/--version must not turn into a leak report.
QUIET_ENV = dict(os.environ, ASAN_OPTIONS=":".join(
    o for o in (os.environ.get("ASAN_OPTIONS"), "detect_leaks=0") if o))


def help_flags(binary):
    """{flag: default} from `BINARY --help` (Abseil's format)."""
    text = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=60,
                          env=QUIET_ENV).stdout
    flags = {}
    for m in re.finditer(r"^\s{4}--(\w+) \((.*?)\);\s+default: (.*?);$", text, re.M | re.S):
        flags[m.group(1)] = m.group(3).strip()
    return flags


def accepts(binary, args):
    """(ok, error): the binary parses `args` (names and values) and exits on --version."""
    r = subprocess.run([binary, *args, "--version"], capture_output=True, text=True, timeout=60,
                       env=QUIET_ENV)
    errors = [l for l in (r.stdout + r.stderr).splitlines() if l.startswith("ERROR")]
    return r.returncode == 0, "; ".join(errors)


def port_of(address):
    return int(address.rsplit(":", 1)[1])


# ---------------------------------------------------------------------------- checks
def check_dockerfile(path, source_dir, server, client, targets):
    name = os.path.relpath(path, source_dir)
    print(f"== {name}")
    stages, _ = stages_of(parse_dockerfile(path))
    if not check(len(stages) >= 2, f"{name}: multi-stage ({len(stages)} stages)"):
        return
    final = stages[-1]
    build = next((s for s in stages if s.name == "build"), None)
    check(build is not None and build is not final, f"{name}: a stage named 'build' before the runtime stage")
    names = {s.name: s.index for s in stages if s.name}
    patterns = ignore_patterns(path + ".dockerignore")
    check(bool(patterns), f"{name}: {os.path.basename(path)}.dockerignore exists (keeps build trees and tools/.work out of the context)")

    for stage in stages:
        copied = {}  # destination path in the image -> source in the repository
        workdir = "/"
        for number, instr, args in stage.instructions:
            where = f"{name}:{number}"
            if instr == "WORKDIR":
                workdir = os.path.join(workdir, args)
            if instr == "ADD":
                check(False, f"{where}: ADD (use COPY; ADD fetches URLs and unpacks archives)")
            if instr == "COPY":
                flags, rest = split_flags(args)
                parts = exec_form(rest) or shlex.split(rest)
                sources, dest = parts[:-1], parts[-1]
                if "from" in flags:
                    src = flags["from"]
                    ok = (src in names and names[src] < stage.index) or (src.isdigit() and int(src) < stage.index)
                    check(ok, f"{where}: COPY --from={src} names an earlier stage")
                    continue
                for src in sources:
                    rel = os.path.normpath(src).lstrip("/")
                    exists = os.path.exists(os.path.join(source_dir, rel))
                    check(exists, f"{where}: COPY source '{src}' exists")
                    if exists:
                        kept = any(not excluded(f, patterns) for f in files_under(source_dir, rel))
                        check(kept, f"{where}: COPY source '{src}' is in the build context (not .dockerignored)")
                        target = dest if dest.startswith("/") else os.path.join(workdir, dest)
                        if os.path.isfile(os.path.join(source_dir, rel)):
                            if dest.endswith("/"):
                                target = os.path.join(target, os.path.basename(rel))
                            copied[os.path.normpath(target)] = rel
                            copied[os.path.normpath(os.path.relpath(target, workdir))] = rel
            if instr == "RUN":
                for script in re.findall(r"(?<![\w/.-])((?:/[\w.-]+)*/?[\w.-]*/?[\w.-]+\.sh)\b", args):
                    rel = copied.get(os.path.normpath(script)) or copied.get(os.path.normpath(os.path.join(workdir, script)))
                    if rel is None and not script.startswith("/"):
                        rel = script
                    if rel is None:
                        check(False, f"{where}: RUN calls {script}, which no COPY of this stage put there")
                        continue
                    full = os.path.join(source_dir, rel)
                    check(os.path.isfile(full) and os.access(full, os.X_OK),
                          f"{where}: RUN calls {script} = {rel}, present and executable")
                    if rel == "tools/install_deps.sh" and "--runtime" in args:
                        with open(full, encoding="utf-8") as f:
                            check("--runtime)" in f.read(), f"{where}: tools/install_deps.sh has a --runtime mode")

    # The build stage uses the project's scripts.
    if build is not None:
        runs = " ".join(a for _, a in build.all("RUN"))
        check(re.search(r"(^|\s)tools/install_deps\.sh(\s|&|;|$)", runs) is not None and "install_deps.sh --runtime" not in runs,
              f"{name}: build stage runs tools/install_deps.sh (full)")
        check("tools/build.sh" in runs or "tools/test.sh" in runs, f"{name}: build stage runs tools/build.sh / tools/test.sh")
    final_runs = " ".join(a for _, a in final.all("RUN"))
    check(re.search(r"install_deps\.sh --runtime", final_runs) is not None,
          f"{name}: runtime stage installs only runtime packages (install_deps.sh --runtime)")
    check(not re.search(r"apt-get install", final_runs), f"{name}: runtime stage installs packages only through install_deps.sh")

    # USER: numeric and not root.
    users = final.all("USER")
    user = users[-1][1] if users else ""
    uid = user.split(":")[0]
    check(bool(users) and uid.isdigit() and int(uid) != 0,
          f"{name}: runtime USER is numeric and not root ({user or 'none'})")

    # ENTRYPOINT / CMD.
    entry = [exec_form(a) for _, a in final.all("ENTRYPOINT")]
    cmd = [exec_form(a) for _, a in final.all("CMD")]
    entry = entry[-1] if entry else None
    cmd = cmd[-1] if cmd else []
    if not check(bool(entry), f"{name}: ENTRYPOINT in exec form"):
        return
    binary = os.path.basename(entry[0])
    check(binary == "jasper-server" and binary in targets, f"{name}: ENTRYPOINT {entry[0]} is the CMake target jasper-server")
    build_runs = " ".join(a for _, a in build.all("RUN")) if build else ""

    def installed(target, image_path):
        built = f"build/{targets.get(target, '?')}/{target}"
        dest_dir = os.path.dirname(image_path)
        return built in build_runs and dest_dir in build_runs

    check(installed(binary, entry[0]), f"{name}: the build stage copies build/{targets.get(binary, '?')}/{binary} to {os.path.dirname(entry[0])}")
    check(any(f"--from=build {os.path.dirname(os.path.dirname(entry[0]))}" in a or
              f"--from=build {os.path.dirname(entry[0])}" in a for _, a in final.all("COPY")),
          f"{name}: the runtime stage copies {os.path.dirname(entry[0])} from the build stage")
    server_args = (entry[1:] if entry else []) + (cmd or [])
    flags = {}
    for a in server_args:
        m = re.match(r"--(\w+)(?:=(.*))?$", a)
        if check(m is not None, f"{name}: server argument '{a}' is --flag=value"):
            flags[m.group(1)] = m.group(2)
    listen = flags.get("listen", "")
    check(listen.startswith("0.0.0.0:"), f"{name}: --listen={listen} serves the network")
    grpc_port = port_of(listen) if ":" in listen else None
    metrics = flags.get("metrics_address", "")
    metrics_port = port_of(metrics) if ":" in metrics else None
    check(metrics_port is not None, f"{name}: --metrics_address set ({metrics or 'missing'})")
    if server:
        known = help_flags(server)
        default_port = port_of(known.get("listen", '"127.0.0.1:50051"').strip('"'))
        check(grpc_port == default_port, f"{name}: gRPC port {grpc_port} = the server's default port {default_port}")
        for flag in flags:
            check(flag in known, f"{name}: --{flag} is in `jasper-server --help`")
        ok, error = accepts(server, server_args)
        check(ok, f"{name}: jasper-server accepts the CMD flags and values{(': ' + error) if error else ''}")
    model = flags.get("model_dir", "")
    check(model.startswith("/opt/jasper-serve/share/jasper-serve/models/") and
          os.path.isfile(os.path.join(source_dir, "models", os.path.basename(model), "model.json")),
          f"{name}: --model_dir={model} is the shipped default model, installed in the image")
    check(f"models/{os.path.basename(model)}" in build_runs, f"{name}: the build stage installs models/{os.path.basename(model)}")

    # EXPOSE.
    exposed = set()
    for _, a in final.all("EXPOSE"):
        exposed.update(int(p.split("/")[0]) for p in a.split())
    check(exposed == {grpc_port, metrics_port}, f"{name}: EXPOSE {sorted(exposed)} = gRPC {grpc_port} + metrics {metrics_port}")

    # HEALTHCHECK.
    health = final.all("HEALTHCHECK")
    if check(len(health) == 1, f"{name}: one HEALTHCHECK in the runtime stage"):
        hflags, rest = split_flags(health[0][1])
        check(rest.startswith("CMD "), f"{name}: HEALTHCHECK CMD")
        hcmd = exec_form(rest[4:]) or []
        check(bool(hcmd) and os.path.basename(hcmd[0]) == "jasper-client" and "jasper-client" in targets,
              f"{name}: HEALTHCHECK runs jasper-client (a CMake target)")
        check(bool(hcmd) and installed("jasper-client", hcmd[0]),
              f"{name}: the build stage copies jasper-client to {os.path.dirname(hcmd[0]) if hcmd else '?'}")
        check("--health" in hcmd, f"{name}: HEALTHCHECK uses --health (grpc.health.v1)")
        server_flag = next((a for a in hcmd if a.startswith("--server=")), "")
        check(":" in server_flag and port_of(server_flag) == grpc_port,
              f"{name}: HEALTHCHECK checks the gRPC port ({server_flag})")
        check("timeout" in hflags and "interval" in hflags, f"{name}: HEALTHCHECK has --interval and --timeout")
        if client:
            ok, error = accepts(client, hcmd[1:])
            check(ok, f"{name}: jasper-client accepts the HEALTHCHECK flags{(': ' + error) if error else ''}")

    stop = final.all("STOPSIGNAL")
    check(not stop or stop[-1][1] == "SIGTERM", f"{name}: STOPSIGNAL is SIGTERM (the server drains on it)")

    if "gpu" in os.path.basename(path):
        check("JASPER_CUDA=ON" in build_runs, f"{name}: CUDA is required in the build (JASPER_CUDA=ON)")
        check(any("--from=cuda" in a and "/usr/local/cuda" in a for _, a in build.all("COPY")) if build else False,
              f"{name}: the build stage gets the CUDA toolkit from the CUDA image")
        env = " ".join(a for _, a in final.all("ENV"))
        check("NVIDIA_VISIBLE_DEVICES=" in env and re.search(r"NVIDIA_DRIVER_CAPABILITIES=\S*compute", env) is not None,
              f"{name}: NVIDIA_VISIBLE_DEVICES and NVIDIA_DRIVER_CAPABILITIES (compute) set for the container toolkit")
        check(flags.get("device") == "cuda", f"{name}: --device=cuda (no silent CPU fallback)")


def check_runtime_packages(source_dir, binaries):
    print("== runtime packages (tools/install_deps.sh --runtime)")
    if not binaries or not shutil.which("ldd") or not shutil.which("dpkg-query"):
        print("skip: no binaries given, or no ldd/dpkg-query here")
        return
    listed = subprocess.run([os.path.join(source_dir, "tools/install_deps.sh"), "--runtime", "--list"],
                            capture_output=True, text=True, check=True).stdout.split()
    check(bool(listed), f"install_deps.sh --runtime --list names {len(listed)} packages")
    installed, provides = installed_packages()
    for p in listed:
        check(p in installed, f"runtime package {p} is a real (installed) package here")
    closure = dpkg_closure(listed, installed, provides)
    # In every debian:bookworm(-slim) image already (Essential, or needed by apt/dpkg).
    base = {"libc6", "libgcc-s1", "libstdc++6", "zlib1g"}
    # Each library by the path ldd shows; one dpkg-query -S for all of them.
    libs = {}  # (binary, soname) -> path
    for binary in binaries:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
        if re.search(r"lib(a|t|ub|l)san\.so", out):
            print(f"skip: {os.path.basename(binary)} is a sanitizer build (not what an image ships)")
            continue
        for line in out.splitlines():
            m = re.search(r"^\s*(\S+)\s*=>\s*(/\S+)", line)
            if m:
                libs[(binary, m.group(1))] = m.group(2)
    owner = file_owners(sorted(set(libs.values())))
    reported = set()
    for (binary, soname), path in libs.items():
        pkg = owner[path]
        if pkg is None:
            # Not from a package (e.g. a library next to the build): nothing apt can install.
            check(False, f"{os.path.basename(binary)}: {soname} belongs to no Debian package")
            continue
        if pkg in reported:
            continue
        reported.add(pkg)
        check(pkg in closure or pkg in base,
              f"{os.path.basename(binary)} loads {soname} from {pkg}, installed by --runtime")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source-dir", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    parser.add_argument("--server", help="built jasper-server (flags are checked against it)")
    parser.add_argument("--client", help="built jasper-client")
    parser.add_argument("dockerfiles", nargs="*")
    args = parser.parse_args()
    source_dir = os.path.abspath(args.source_dir)
    files = args.dockerfiles or sorted(
        os.path.join(source_dir, "docker", f) for f in os.listdir(os.path.join(source_dir, "docker"))
        if fnmatch.fnmatch(f, "Dockerfile.*") and not f.endswith(".dockerignore"))
    targets = cmake_targets(source_dir)
    for path in files:
        check_dockerfile(os.path.abspath(path), source_dir, args.server, args.client, targets)
    check_runtime_packages(source_dir, [b for b in (args.server, args.client) if b])
    print(f"{len(PASSES)} passed, {len(FAILURES)} failed")
    for f in FAILURES:
        print("FAILED: " + f)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
