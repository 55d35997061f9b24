"""A private sshd on 127.0.0.1 for the multi-node launch test: two "nodes" (localhost, 127.0.0.1), one machine.

DeepSpeed's multi-node launcher runs ``pdsh -w host1,host2`` over ssh, exporting the variables it selects
into each node's command line. To run that for real on a CI machine, this starts OpenSSH's own server
(Debian's openssh-server; ``scripts/setup.sh`` installs it with pdsh when it can) on a free port, with a
host key, a client key and an authorized_keys file that all live in a temporary directory: nothing in
``~/.ssh`` or ``/etc/ssh`` is read or changed. DeepSpeed's reachability check and pdsh reach it through
an ``ssh`` wrapper first on PATH that adds a client config (port, key, no host-key prompt).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import frameworks

SSHD = "/usr/sbin/sshd"


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def missing() -> str | None:
    """Why a local sshd cannot run here (None when it can)."""
    if not os.path.isfile(SSHD):
        return f"{SSHD} not found: install Debian's openssh-server (scripts/setup.sh does, as root)"
    for tool in ("pdsh", "ssh", "ssh-keygen"):
        if shutil.which(tool) is None:
            return f"{tool} not found: install Debian's pdsh and openssh-client (scripts/setup.sh does, as root)"
    return None


@contextlib.contextmanager
def local_sshd(workdir: str) -> Iterator[dict[str, str]]:
    """Run sshd for the current user on 127.0.0.1; yield the environment pdsh needs to reach it."""
    reason = missing()
    if reason:
        raise frameworks.FrameworkUnavailable(reason)
    os.makedirs(workdir, exist_ok=True)
    host_key, user_key = os.path.join(workdir, "host_ed25519"), os.path.join(workdir, "user_ed25519")
    for key in (host_key, user_key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", key], check=True)
    authorized = os.path.join(workdir, "authorized_keys")
    shutil.copy(user_key + ".pub", authorized)
    os.chmod(authorized, 0o600)
    port = free_port()
    config = os.path.join(workdir, "sshd_config")
    with open(config, "w", encoding="utf-8") as f:
        f.write(
            f"Port {port}\nListenAddress 127.0.0.1\nHostKey {host_key}\nAuthorizedKeysFile {authorized}\n"
            f"PidFile {os.path.join(workdir, 'sshd.pid')}\nPasswordAuthentication no\nUsePAM no\n"
            "StrictModes no\nPermitRootLogin prohibit-password\nAcceptEnv *\n"
        )
    if os.geteuid() == 0:
        os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory
    log = os.path.join(workdir, "sshd.log")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", config], stdout=open(log, "w"), stderr=subprocess.STDOUT)
    # DeepSpeed calls plain `ssh HOST hostname` to check each host before pdsh runs `ssh` too: an `ssh` first on
    # PATH that reads this directory's client config reaches the private sshd from both (OpenSSH reads
    # ~/.ssh/config from the passwd home, so a changed $HOME would not do)
    client = os.path.join(workdir, "ssh_config")
    with open(client, "w", encoding="utf-8") as f:
        f.write(
            f"Host localhost 127.0.0.1\n  Port {port}\n  IdentityFile {user_key}\n  IdentitiesOnly yes\n"
            "  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  BatchMode yes\n  LogLevel ERROR\n"
        )
    bindir = os.path.join(workdir, "bin")
    os.makedirs(bindir, exist_ok=True)
    wrapper = os.path.join(bindir, "ssh")
    with open(wrapper, "w", encoding="utf-8") as f:
        f.write(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {client} "$@"\n')
    os.chmod(wrapper, 0o755)
    ssh_args = f"-F {client}"
    try:
        deadline = time.time() + 30
        while True:
            probe = subprocess.run(
                ["ssh", *ssh_args.split(), "127.0.0.1", "true"], capture_output=True, text=True, timeout=30
            )
            if probe.returncode == 0:
                break
            if proc.poll() is not None or time.time() > deadline:
                with open(log, encoding="utf-8", errors="replace") as f:
                    raise RuntimeError(
                        f"the local sshd on port {port} does not accept the test key: "
                        f"{probe.stderr.strip()}; sshd log: {f.read()[-2000:]}"
                    )
            time.sleep(0.5)
        yield {"PATH": bindir + os.pathsep + os.environ.get("PATH", "")}
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
