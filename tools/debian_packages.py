"""Debian package queries shared by the project's checks (dpkg-query only, no apt):
which packages are installed, what a list of packages pulls in, which package owns a file.

Used by docker/check_dockerfiles.py (the images' runtime packages cover what the binaries
load) and tests/install_deps_test.py (tools/install_deps.sh covers what the stages run).
"""
import os
import subprocess


def installed_packages():
    """{installed package: [dependency groups, each a list of alternatives]}, plus the virtual
    names each provides ({virtual: [providers]}), from one dpkg-query."""
    out = subprocess.run(
        ["dpkg-query", "-W", "-f=${Package}\t${Status}\t${Depends}, ${Pre-Depends}\t${Provides}\n"],
        capture_output=True, text=True, check=True).stdout
    packages, provides = {}, {}
    for line in out.splitlines():
        name, status, depends, provided = (line.split("\t") + ["", "", ""])[:4]
        if not status.endswith(" installed"):
            continue
        groups = []
        for group in depends.split(","):
            alts = [a.strip().split(" ")[0].split(":")[0] for a in group.split("|")]
            alts = [a for a in alts if a]
            if alts:
                groups.append(alts)
        packages[name] = groups
        for virtual in provided.split(","):
            virtual = virtual.strip().split(" ")[0]
            if virtual:
                provides.setdefault(virtual, []).append(name)
    return packages, provides


def dpkg_closure(roots, installed, provides=None):
    """Installed packages reachable from `roots` through Depends/Pre-Depends (what
    `apt-get install --no-install-recommends ROOTS` brings), virtual names resolved."""
    provides = provides or {}
    seen, todo = set(), list(roots)
    while todo:
        p = todo.pop()
        if p in seen or p not in installed:
            continue
        seen.add(p)
        for alts in installed[p]:
            candidates = [c for a in alts for c in ([a] if a in installed else provides.get(a, []))]
            if candidates:
                todo.append(candidates[0])
    return seen


def base_packages():
    """Installed packages that every Debian system has (Essential, or Priority required: what
    `debootstrap --variant=minbase` installs), with their dependencies."""
    out = subprocess.run(["dpkg-query", "-W", "-f=${Package}\t${Essential}\t${Priority}\t${Status}\n"],
                         capture_output=True, text=True, check=True).stdout
    roots = []
    for line in out.splitlines():
        name, essential, priority, status = (line.split("\t") + ["", "", ""])[:4]
        if status.endswith(" installed") and (essential == "yes" or priority == "required"):
            roots.append(name)
    return roots


def file_owners(paths):
    """{path: package} for the paths a package ships. Each path is also tried as its real path
    and without /usr (merged /usr: dpkg knows a file by the path its package ships)."""
    candidates = {}
    for path in paths:
        real = os.path.realpath(path)
        forms = [path, real]
        for p in (path, real):
            if p.startswith("/usr/"):
                forms.append(p[len("/usr"):])
            else:
                forms.append("/usr" + p)
        candidates[path] = list(dict.fromkeys(forms))
    every = sorted({p for forms in candidates.values() for p in forms})
    out = subprocess.run(["dpkg-query", "-S", *every], capture_output=True, text=True).stdout if every else ""
    owner = {}
    for line in out.splitlines():
        pkgs, _, owned = line.partition(": ")
        if pkgs.startswith("diversion by"):
            continue
        owner.setdefault(owned.strip(), pkgs.split(",")[0].split(":")[0].strip())
    return {path: next((owner[p] for p in forms if p in owner), None) for path, forms in candidates.items()}
