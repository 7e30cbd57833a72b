"""Run a command under the sandbox a rendered ai-engine.service asks systemd
for, as far as a machine without systemd as PID 1 can reproduce it:

    python unit_sandbox.py UNIT -- COMMAND...        (as root)

stage 1 (root): a private mount namespace with /proc remounted as ProcSubset=
and ProtectProc= ask (subset=pid, hidepid=invisible), the LimitMEMLOCK= limit,
then setpriv for CapabilityBoundingSet= (with no capability kept, also none
inheritable or ambient) and NoNewPrivileges=; stage 2 (no privileges left):
a seccomp filter built with libseccomp from SystemCallFilter= (the sets
expanded by `systemd-analyze syscall-filter`, as systemd does),
SystemCallErrorNumber=, SystemCallArchitectures=native,
MemoryDenyWriteExecute= and RestrictAddressFamilies=, the same rules
systemd's seccomp-util.c installs for them; then exec COMMAND.

Not reproduced: User= (the test interpreter lives under /root), the file
system directives (ProtectSystem= and friends predate this test).
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import resource
import shutil
import socket
import subprocess
import sys

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_EQ, SCMP_CMP_MASKED_EQ = 4, 7
PROT_WRITE, PROT_EXEC = 0x2, 0x4
SHM_EXEC = 0o100000
CLONE_NEWNS = 0x00020000
MS_REC, MS_PRIVATE = 0x4000, 0x40000


class ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def unit_directives(text: str) -> dict[str, list[str]]:
    """[Service] directives of a unit, each with every value it was given."""
    out: dict[str, list[str]] = {}
    section = None
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line
            continue
        if section == "[Service]" and "=" in line:
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


@functools.cache
def syscall_set(name: str) -> frozenset[str]:
    """A system call, or a @set expanded recursively as systemd knows it."""
    if not name.startswith("@"):
        return frozenset([name])
    out = subprocess.run(["systemd-analyze", "syscall-filter", "--no-pager", name], capture_output=True, text=True,
                         check=True, timeout=30).stdout
    calls: set[str] = set()
    for line in out.splitlines()[1:]:
        item = line.strip()
        if item and not item.startswith("#"):
            calls |= syscall_set(item)
    return frozenset(calls)


def allowed_syscalls(filter_lines: list[str]) -> set[str]:
    """SystemCallFilter= lines in order: the first sets allow-list mode,
    later ones add, `~` ones remove."""
    allowed: set[str] = set()
    for line in filter_lines:
        deny = line.startswith("~")
        names = set().union(*(syscall_set(n) for n in line.lstrip("~").split()))
        allowed = allowed - names if deny else allowed | names
    return allowed


def load_seccomp(d: dict[str, list[str]]) -> None:
    lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(ArgCmp)]
    lib.seccomp_load.argtypes = [ctypes.c_void_p]
    assert d.get("SystemCallArchitectures") in (None, ["native"])
    error = getattr(errno, d.get("SystemCallErrorNumber", ["EPERM"])[-1])
    # libseccomp filters only the native ABI by default and kills a call from
    # any other: SystemCallArchitectures=native.
    ctx = lib.seccomp_init(0x00050000 | error)  # SCMP_ACT_ERRNO(error): everything not allowed below
    if not ctx:
        raise OSError("seccomp_init failed")

    def allow(name: str, *conditions: tuple[int, int, int, int]) -> None:
        nr = lib.seccomp_syscall_resolve_name(name.encode())
        if nr < 0:
            return  # not a system call of this architecture
        args = (ArgCmp * max(1, len(conditions)))(*[ArgCmp(*c) for c in conditions])
        rc = lib.seccomp_rule_add_array(ctx, SCMP_ACT_ALLOW, nr, len(conditions), args)
        if rc < 0:
            raise OSError(-rc, f"seccomp_rule_add {name}")

    calls = allowed_syscalls(d["SystemCallFilter"])
    conditional: dict[str, list[list[tuple[int, int, int, int]]]] = {}
    if d.get("MemoryDenyWriteExecute") == ["yes"]:
        wx = PROT_WRITE | PROT_EXEC
        conditional["mmap"] = [[(2, SCMP_CMP_MASKED_EQ, wx, v)] for v in (0, PROT_WRITE, PROT_EXEC)]
        conditional["mprotect"] = conditional["pkey_mprotect"] = [[(2, SCMP_CMP_MASKED_EQ, PROT_EXEC, 0)]]
        conditional["shmat"] = [[(2, SCMP_CMP_MASKED_EQ, SHM_EXEC, 0)]]
    if "RestrictAddressFamilies" in d:
        families = d["RestrictAddressFamilies"][-1].split()
        conditional["socket"] = [[(0, SCMP_CMP_EQ, int(getattr(socket, f)), 0)] for f in families]
    for name in sorted(calls):
        if name in conditional:
            for rule in conditional[name]:
                allow(name, *rule)
        else:
            allow(name)
    rc = lib.seccomp_load(ctx)
    if rc < 0:
        raise OSError(-rc, "seccomp_load")


def enter_namespace(d: dict[str, list[str]]) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNS) != 0 or libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "private mount namespace")
    opts = []
    if d.get("ProcSubset") == ["pid"]:
        opts.append("subset=pid")
    if d.get("ProtectProc"):
        opts.append(f"hidepid={d['ProtectProc'][-1]}")
    if opts and libc.mount(b"proc", b"/proc", b"proc", 0, ",".join(opts).encode()) != 0:
        raise OSError(ctypes.get_errno(), "mount /proc " + ",".join(opts))


def main(argv: list[str]) -> None:
    stage2 = argv[0] == "--seccomp"
    unit, command = argv[int(stage2)], argv[argv.index("--") + 1:]
    with open(unit) as f:
        d = unit_directives(f.read())
    if stage2:
        load_seccomp(d)
        os.execvp(command[0], command)
    enter_namespace(d)
    memlock = d.get("LimitMEMLOCK", ["infinity"])[-1]
    limit = resource.RLIM_INFINITY if memlock == "infinity" else int(memlock)
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    if hard != resource.RLIM_INFINITY and (limit == resource.RLIM_INFINITY or limit > hard):
        limit = hard  # raising the hard limit needs CAP_SYS_RESOURCE, which a container may lack
    resource.setrlimit(resource.RLIMIT_MEMLOCK, (limit, limit))
    caps = d["CapabilityBoundingSet"][-1].split()
    assert not caps, "this harness reproduces an empty capability bounding set only"
    setpriv = [shutil.which("setpriv"), "--bounding-set=-all", "--inh-caps=-all", "--ambient-caps=-all"]
    if d.get("NoNewPrivileges") == ["yes"]:
        setpriv.append("--no-new-privs")
    os.execv(setpriv[0], setpriv + ["--", sys.executable, os.path.abspath(__file__), "--seccomp", unit, "--",
                                    *command])


if __name__ == "__main__":
    main(sys.argv[1:])
