#!/usr/bin/env python3
"""tools/install_deps.sh installs everything the README's two commands use (CTest:
install_deps_test). A stage that starts using a new program fails this test until the install
list has the program's package.

  install_deps_test.py --source-dir DIR

What is checked, on this machine's dpkg database:
- programs: every command that tools/run_demo.sh and tools/test.sh run, and the scripts they
  and CTest (tests/CMakeLists.txt) run, found by parsing the scripts with shfmt (commands,
  compilers named in CC/CXX assignments, wrappers such as sudo/env/timeout looked through);
  each must resolve in Debian's PATH (/usr/sbin:/usr/bin:/sbin:/bin, not a developer's
  /usr/local or virtualenv) to a file that a package in install_deps.sh's list, or a package
  of the base system (Essential or Priority required: what debootstrap minbase installs), or
  one of their dependencies, ships;
- the compilers CMake uses by default (cc, c++) and the generator's program (ninja), likewise;
- sanitizer and libFuzzer runtimes: for each compiler a stage names and each -fsanitize /
  JASPER_SANITIZE value in tools/test.sh, the runtime library that compiler links must come
  from such a package (clang's libclang_rt.* are not a dependency of clang-14);
- Python modules: every module imported by the Python scripts CTest runs with the system
  python3 (and by the project modules they import) is in the standard library, in the
  project, or shipped by such a package;
- programs run from C++ tests (std::system): listed below by hand, with the file that must
  still name them (the only part that is not found automatically).
Exit status 0 when every check passes, 1 otherwise; one line per failure.
"""
import argparse
import ast
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools"))
from debian_packages import base_packages, dpkg_closure, file_owners, installed_packages  # noqa: E402

DEBIAN_PATH = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
ENTRY_SCRIPTS = ["tools/run_demo.sh", "tools/test.sh"]
# Commands that run their arguments as a command: (name, options that take a value).
WRAPPERS = {"sudo": {"-u", "-g"}, "env": {"-u"}, "exec": set(), "nice": {"-n"}, "nohup": set(),
            "time": set(), "stdbuf": set(), "xargs": {"-n", "-I", "-P", "-d"}, "timeout": {"-s", "-k"}}
QUERIES = {"command", "type", "hash", "which"}  # `command -v X` asks, it does not run X
# Programs run by C++ test code through std::system (not in any script): program -> source file.
PROGRAMS_IN_CXX_TESTS = {"openssl": "tests/test_certs.h"}
COMPILER_VARS = re.compile(r"^(CC|CXX|[A-Z_]*_(CC|CXX))$")

FAILURES = []


def fail(what):
    FAILURES.append(what)
    print("FAIL:", what)


class ShellScan:
    """Commands, compiler assignments and script references of shell scripts (via shfmt)."""

    def __init__(self, source_dir):
        self.source_dir = source_dir
        self.variables = {}  # NAME -> literal value (last literal assignment or ${NAME:-default})
        self.functions = set()
        self.commands = {}  # command -> first script that runs it
        self.compilers = {}  # compiler -> script
        self.scripts = []  # in scan order
        self.texts = {}

    def literal_parts(self, node):
        """The literal pieces of a Word joined, expansions left out ("$root/tools/x.sh" -> "/tools/x.sh")."""
        out = ""
        for part in (node or {}).get("Parts", []):
            if part.get("Type") in ("Lit", "SglQuoted"):
                out += part.get("Value", "")
            elif part.get("Type") == "DblQuoted":
                out += self.literal_parts(part)
        return out

    def word(self, node):
        """The literal value of a shfmt Word, or None when it depends on run time."""
        if not node:
            return None
        out = ""
        for part in node.get("Parts", []):
            t = part.get("Type")
            if t in ("Lit", "SglQuoted"):
                out += part.get("Value", "")
            elif t == "DblQuoted":
                inner = self.word(part)
                if inner is None:
                    return None
                out += inner
            elif t == "ParamExp":
                name = part.get("Param", {}).get("Value")
                value = self.variables.get(name)
                if value is None and part.get("Exp"):
                    value = self.word(part["Exp"].get("Word"))  # ${NAME:-default}
                if value is None:
                    return None
                out += value
            else:
                return None
        return out

    def scan(self, rel):
        path = os.path.join(self.source_dir, rel)
        if rel in self.texts or not os.path.isfile(path):
            return
        with open(path) as f:
            self.texts[rel] = f.read()
        self.scripts.append(rel)
        tree = subprocess.run(["shfmt", "--to-json"], input=self.texts[rel], capture_output=True,
                              text=True, check=True).stdout
        self.walk(json.loads(tree), rel)

    def walk(self, node, rel):
        if isinstance(node, list):
            for n in node:
                self.walk(n, rel)
            return
        if not isinstance(node, dict):
            return
        t = node.get("Type")
        if t == "FuncDecl":
            self.functions.add(node["Name"]["Value"])
        if t == "CallExpr":
            for assign in node.get("Assigns") or []:
                name = assign["Name"]["Value"]
                value = self.word(assign.get("Value"))
                if value is not None and name not in self.variables:
                    self.variables[name] = value
                if value and COMPILER_VARS.match(name):
                    self.compilers.setdefault(value, rel)
            args = [self.word(a) for a in node.get("Args") or []]
            raw = node.get("Args") or []
            if args and args[0] in ("source", ".") and len(raw) > 1:
                # A sourced library ("$root/tools/lib/server.sh"): its functions count as known.
                m = re.search(r"(tools|tests)/[\w./-]+\.sh$", self.literal_parts(raw[1]))
                if m:
                    self.scan(m.group(0))
            self.command(args, rel)
            for a in args[1:]:  # scripts passed to a function or an interpreter
                self.reference(a, rel)
        for key, value in node.items():
            if key not in ("Pos", "End") and isinstance(value, (dict, list)):
                self.walk(value, rel)

    def command(self, args, rel):
        while args and args[0] is not None:
            name = args[0]
            if name in QUERIES:
                return
            if name in WRAPPERS:
                rest, takes_value = args[1:], WRAPPERS[name]
                self.commands.setdefault(name, rel)
                while rest and rest[0] is not None and (rest[0].startswith("-") or "=" in rest[0]):
                    rest = rest[2:] if rest[0] in takes_value else rest[1:]
                if name == "timeout" and rest:
                    rest = rest[1:]  # the duration
                args = rest
                continue
            if not name:  # an empty expansion ($SUDO as root): the next word is the command
                args = args[1:]
                continue
            if "/" in name:
                self.reference(name, rel)
            elif name not in self.functions:
                self.commands.setdefault(name, rel)
            return

    def reference(self, word, rel):
        if word and re.fullmatch(r"(\./)?(tools|tests|docker|\.ci)/[\w./-]+\.sh", word):
            self.scan(word[2:] if word.startswith("./") else word)


def builtins():
    out = subprocess.run(["bash", "-c", "compgen -b; compgen -k"], capture_output=True, text=True).stdout
    return set(out.split())


def find_in_debian_path(name):
    for d in DEBIAN_PATH:
        p = os.path.join(d, name)
        if os.path.isfile(p) and os.access(p, os.X_OK):
            return p
    return None


def python_imports(path, source_dir, seen):
    """{module: importing file} for `path` and the project modules it imports."""
    if path in seen:
        return {}
    seen.add(path)
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    found = {}
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        for name in names:
            top = name.split(".")[0]
            local = [os.path.join(d, top + ".py") for d in
                     (os.path.dirname(path), os.path.join(source_dir, "tools"))]
            local = next((p for p in local if os.path.isfile(p)), None)
            if local:
                found.update(python_imports(local, source_dir, seen))
            elif top not in sys.stdlib_module_names:
                found.setdefault(top, os.path.relpath(path, source_dir))
    return found


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--source-dir", required=True)
    parser.add_argument("--drop", action="append", default=[],
                        help="check as if install_deps.sh did not list this package (self-test)")
    args = parser.parse_args()
    source_dir = os.path.abspath(args.source_dir)
    os.chdir(source_dir)

    listed = subprocess.run(["tools/install_deps.sh", "--list"], capture_output=True, text=True,
                            check=True).stdout.split()
    # The suite's proof that this test can fail: CTest runs it once more with a package dropped.
    listed = [p for p in listed if p not in args.drop]
    installed, provides = installed_packages()
    for p in listed:
        if p not in installed:
            fail(f"install_deps.sh lists {p}, which is not installed here (run tools/install_deps.sh)")
    allowed = dpkg_closure(listed, installed, provides) | dpkg_closure(base_packages(), installed, provides)

    # Scripts: the README's two commands, and every script CTest runs.
    scan = ShellScan(source_dir)
    for rel in ENTRY_SCRIPTS:
        scan.scan(rel)
    with open("tests/CMakeLists.txt") as f:
        cmake_tests = f.read()
    ctest_files = sorted(set(re.findall(r"\$\{PROJECT_SOURCE_DIR\}/([\w./-]+\.(?:sh|py))", cmake_tests)))
    for rel in ctest_files:
        if rel.endswith(".sh"):
            scan.scan(rel)
    known = builtins() | scan.functions
    programs = {name: rel for name, rel in scan.commands.items() if name not in known}
    programs.update({c: rel for c, rel in scan.compilers.items()})
    programs.setdefault("cc", "CMake (default C compiler)")
    programs.setdefault("c++", "CMake (default C++ compiler)")
    if any("-G Ninja" in t for t in scan.texts.values()):
        programs.setdefault("ninja", "cmake -G Ninja")
    for program, rel in PROGRAMS_IN_CXX_TESTS.items():
        with open(rel) as f:
            if f'"{program} ' not in f.read():
                fail(f"{rel} no longer runs {program}: update PROGRAMS_IN_CXX_TESTS")
        programs.setdefault(program, rel)

    paths = {}
    for program, rel in sorted(programs.items()):
        path = find_in_debian_path(program)
        if path is None:
            fail(f"{rel} runs `{program}`, found nowhere in {':'.join(DEBIAN_PATH)}: "
                 "add the package that ships it to tools/install_deps.sh")
        else:
            paths[path] = (program, rel)

    # Sanitizer and libFuzzer runtimes of the compilers the stages name (flags in tools/test.sh
    # and in the CMake files it configures, e.g. the fuzzers' -fsanitize=fuzzer).
    flag_text = scan.texts.get("tools/test.sh", "")
    for root, _, files in os.walk(source_dir):
        if "CMakeLists.txt" in files and not os.path.relpath(root, source_dir).startswith(("build", ".")):
            with open(os.path.join(root, "CMakeLists.txt")) as f:
                flag_text += f.read()
    sanitizers = set()
    for m in re.findall(r"-fsanitize=([\w,-]+)|JASPER_SANITIZE=\"?([\w;]+)", flag_text):
        for v in re.split(r"[;,]", m[0] or m[1]):
            sanitizers.add(v)
    runtimes = {}
    for compiler in sorted({c for c in scan.compilers} | {"c++"}):
        exe = find_in_debian_path(compiler)
        if exe is None:
            continue
        for san in sorted(sanitizers - {"fuzzer-no-link"}):
            if "clang" in compiler:
                lib = {"address": "asan", "undefined": "ubsan_standalone", "thread": "tsan",
                       "fuzzer": "fuzzer"}.get(san)
                name = f"libclang_rt.{lib}-x86_64.a" if lib else None
            else:
                lib = {"address": "asan", "undefined": "ubsan", "thread": "tsan"}.get(san)
                name = f"lib{lib}.so" if lib else None
            if not name:
                continue
            found = subprocess.run([exe, f"-print-file-name={name}"], capture_output=True,
                                   text=True).stdout.strip()
            if "clang" in compiler and not os.path.isabs(found):
                rdir = subprocess.run([exe, "-print-resource-dir"], capture_output=True, text=True).stdout.strip()
                found = os.path.join(rdir, "lib", "linux", name)
            if not os.path.isfile(found):
                fail(f"tools/test.sh builds with {compiler} -fsanitize={san}, but its runtime {name} "
                     "is not installed: add its package to tools/install_deps.sh")
            else:
                runtimes[os.path.realpath(found)] = (f"{compiler} runtime {name}", "tools/test.sh")
    paths.update(runtimes)

    # Python modules of the scripts CTest runs with the system python3.
    seen = set()
    modules = {}
    for rel in ctest_files:
        if rel.endswith(".py"):
            modules.update(python_imports(os.path.join(source_dir, rel), source_dir, seen))
    for module, rel in sorted(modules.items()):
        out = subprocess.run(["/usr/bin/python3", "-c",
                              f"import importlib.util as u; s = u.find_spec({module!r}); "
                              "print(s.origin if s and s.origin else '')"],
                             capture_output=True, text=True).stdout.strip()
        if not out:
            fail(f"{rel} imports {module}, which /usr/bin/python3 cannot find: "
                 "add its python3-* package to tools/install_deps.sh")
        else:
            paths[out] = (f"python module {module}", rel)

    owners = file_owners(sorted(paths))
    for path, (what, rel) in sorted(paths.items(), key=lambda kv: kv[1]):
        pkg = owners[path]
        if pkg is None:
            fail(f"{rel} uses {what} ({path}), which no Debian package ships")
        elif pkg not in allowed:
            fail(f"{rel} uses {what} from package {pkg}, which tools/install_deps.sh does not "
                 "install (nor the base system, nor their dependencies): add it to the list")
        else:
            print(f"ok: {what:40s} {pkg:24s} ({rel})")
    print(f"{len(paths)} programs, runtimes and modules checked in {len(scan.scripts)} scripts "
          f"({', '.join(scan.scripts)}) and {sum(f.endswith('.py') for f in ctest_files)} Python tests; "
          f"{len(FAILURES)} failures")
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
