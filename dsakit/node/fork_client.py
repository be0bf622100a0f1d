"""`python -m dsakit.node.fork_client SOCKET -u -c CODE`: execnet's "python" for a forked worker.

Owns: handing this process's stdio, argv, cwd and environ to the fork server, then standing in for
the worker (signals forwarded, its exit status returned); when the server cannot fork, exec'ing
the plain interpreter instead. Must stay tiny: stdlib only, so starting it costs milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys


def _spawn_plainly(python_args: list[str], why: str) -> int:
    """The server cannot take this worker: become the plain interpreter execnet asked for."""
    print(f"dsakit fork client: {why}; starting this worker plainly", file=sys.stderr)
    os.execv(sys.executable, [sys.executable, *python_args])
    return 1  # not reached


def main(argv: list[str]) -> int:
    path, python_args = argv[0], argv[1:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        payload = json.dumps({"argv": python_args, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
        socket.send_fds(sock, [b"FORK"], [0, 1, 2])
        sock.sendall(struct.pack("!I", len(payload)) + payload)
        reader = sock.makefile("rb")
        first = json.loads(reader.readline() or b"{}")
    except (OSError, ValueError) as error:
        return _spawn_plainly(python_args, f"cannot use the fork server at {path}: {error}")
    if "pid" not in first:
        return _spawn_plainly(python_args, f"the fork server did not fork: {first.get('error', 'no answer')}")
    pid = int(first["pid"])
    # the worker owns the controller's pipes now: our copies must go, so the controller sees EOF
    # when the worker dies (stderr stays: it is the controller's own, not a pipe execnet reads)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)

    def forward(signum: int, _frame: object) -> None:
        try:
            os.kill(pid, signum)
        except OSError:
            pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, forward)
    for line in reader:
        message = json.loads(line)
        if "exit" in message:
            code = int(message["exit"])
            if code < 0:  # the worker died of a signal: so do we
                signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
            return code
    print("dsakit fork client: the fork server went away before the worker exited", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
