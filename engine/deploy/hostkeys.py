"""Which SSH host key each host must present, and trust on first use for the rest.

Where the expected key comes from, first match wins:
  1. the host's own pin, hosts[].host_key: a public key line
     (`ssh-ed25519 AAAA…`, known_hosts format with host names also taken) or
     the path of a known_hosts file that lists the host;
  2. the file named by deploy.known_hosts (OpenSSH format, hashed names too);
  3. build/deploy/known_hosts, where keys accepted on first use were recorded.
A host found in any of them that offers another key is refused (the error
names the host and both fingerprints). A host found nowhere is accepted once
and its key recorded in 3, with a line in the output saying so; from then on
it is held to that key.

Fabric's Connection auto-accepts every key (paramiko AutoAddPolicy) and
never looks at a known_hosts file; here the expected keys are loaded into the
connection's paramiko client, whose own check then raises
BadHostKeyException on a mismatch, and our policy object handles the missing
case. Deployer side only (paramiko).
"""

from __future__ import annotations

import base64
import fcntl
import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from hostspec.specpaths import SSH_KEY_TYPE_PREFIXES, is_key_line
from paramiko.hostkeys import HostKeyEntry, HostKeys, InvalidHostKey

from engine.deploy import DeployError

Say = Callable[[str, str], None]  # (host name, message)
_record_lock = threading.Lock()  # fleet threads append to the TOFU file concurrently


def fingerprint(key) -> str:
    """OpenSSH's form: SHA256:<unpadded base64 of the key blob's sha256>."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return f"{key.get_name()} SHA256:{base64.b64encode(digest).decode().rstrip('=')}"


def known_name(address: str, port: int) -> str:
    """The name a host has in known_hosts (OpenSSH writes [host]:port off port 22)."""
    return address if port == 22 else f"[{address}]:{port}"


def _parse_key_line(text: str, where: str):
    """A PKey from `type base64 [comment]` or `names type base64 [comment]`."""
    fields = text.split()
    if fields and fields[0].startswith(SSH_KEY_TYPE_PREFIXES):
        fields.insert(0, "pinned")  # a bare .pub line: give it the host-names field known_hosts has
    line = " ".join(fields)  # paramiko splits on single spaces
    try:
        entry = HostKeyEntry.from_line(line)
    except (InvalidHostKey, ValueError) as exc:
        entry, why = None, str(exc)
    else:
        why = "unknown key type or bad base64"
    if entry is None:
        raise DeployError(f"not a usable SSH public key line ({why})", where=where,
                          hint="give the line of the host's /etc/ssh/ssh_host_ed25519_key.pub, "
                               "or the path of a known_hosts file")
    return entry.key


def _load_file(path: Path, where: str):
    try:
        return HostKeys(str(path))
    except OSError as exc:
        raise DeployError(f"cannot read the known_hosts file: {exc.strerror}", where=f"{where}: {path}") from None
    except Exception as exc:  # noqa: BLE001 - paramiko raises assorted errors for damaged files
        raise DeployError(f"unreadable known_hosts file: {type(exc).__name__}: {exc}", where=f"{where}: {path}") from None


@dataclass(frozen=True)
class Expected:
    keys: dict          # key type -> PKey
    source: str         # said in the error: where the expectation came from


class HostKeyPolicy:
    """Expected keys per host and the trust-on-first-use store; one per deploy run."""

    def __init__(self, tofu_file: Path, known_hosts: Path | None = None, say: Say = lambda host, msg: None):
        self.tofu_file = Path(tofu_file)
        self.known_hosts = Path(known_hosts).expanduser() if known_hosts else None
        self.say = say
        self._deploy_keys = _load_file(self.known_hosts, "deploy.known_hosts") if self.known_hosts else None

    def expected(self, name: str, address: str, port: int, pin: str | None) -> Expected | None:
        """The keys `name` (at address:port) must present, or None (first use).
        `pin` is hosts[].host_key: a key line, or an absolute known_hosts path."""
        where = f"hosts[{name}].host_key"
        host = known_name(address, port)
        if pin:
            if is_key_line(pin):
                key = _parse_key_line(pin, where)
                return Expected({key.get_name(): key}, f"pinned in {where}")
            path = Path(pin)
            keys = _load_file(path, where).lookup(host)
            if not keys:
                raise DeployError(f"the pinned known_hosts file has no key for {host}", where=f"{where}: {path}",
                                  hint="add the host's line (ssh-keyscan) or pin the key line itself")
            return Expected(dict(keys), f"pinned in {where} ({path})")
        if self._deploy_keys is not None:
            keys = self._deploy_keys.lookup(host)
            if keys:
                return Expected(dict(keys), f"listed in deploy.known_hosts ({self.known_hosts})")
        if self.tofu_file.is_file():
            keys = _load_file(self.tofu_file, "trust-on-first-use store").lookup(host)
            if keys:
                return Expected(dict(keys), f"recorded on first use in {self.tofu_file}")
        return None

    def prepare(self, client, name: str, address: str, port: int, pin: str | None) -> Expected | None:
        """Set up a paramiko SSHClient (before connect) to enforce this host's key."""
        expected = self.expected(name, address, port, pin)
        host = known_name(address, port)
        store = client.get_host_keys()
        store.clear()
        if expected is not None:
            for key in expected.keys.values():
                store.add(host, key.get_name(), key)
        client.set_missing_host_key_policy(_FirstUse(self, name))
        return expected

    def record(self, name: str, host: str, key) -> None:
        """Append the accepted key to the TOFU store (unless another thread did)."""
        line = f"{host} {key.get_name()} {key.get_base64()}\n"
        with _record_lock:
            self.tofu_file.parent.mkdir(parents=True, exist_ok=True)
            with open(self.tofu_file, "a+") as fh:
                fcntl.flock(fh, fcntl.LOCK_EX)  # another deploy in another process
                fh.seek(0)
                if line not in fh.read():
                    fh.write(line)
        self.say(name, f"trust on first use: accepted {host}'s host key {fingerprint(key)}, "
                       f"recorded in {self.tofu_file} (pin it with hosts[].host_key or deploy.known_hosts)")

    def mismatch(self, name: str, exc, expected: Expected | None, via: str = "") -> DeployError:
        """The one-line refusal for paramiko's BadHostKeyException: the host
        offered a key other than the one pinned, listed or recorded for it."""
        source = expected.source if expected else "known keys"
        return DeployError(
            f"host key mismatch for {exc.hostname}{via}: it offered {fingerprint(exc.key)}, expected "
            f"{fingerprint(exc.expected_key)} ({source}); refusing to connect",
            where=name,
            hint="if the host was reinstalled, update the pinned or recorded key; otherwise someone may be "
                 "intercepting the connection")


class _FirstUse:
    """paramiko MissingHostKeyPolicy: called only for a host with no expected key."""

    def __init__(self, policy: HostKeyPolicy, name: str):
        self.policy, self.name = policy, name

    def missing_host_key(self, client, hostname: str, key) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.policy.record(self.name, hostname, key)
