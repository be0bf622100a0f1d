"""`python -m dsakit.node.fork_client SOCKET -u -c CODE`: execnet's "python" for a forked worker.

Owns: handing this process's stdio, argv, cwd and environ to the fork server, then standing in for
the worker (signals forwarded, its exit status returned). Must stay tiny: imports only the stdlib,
so starting it costs milliseconds.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys


def main(argv: list[str]) -> int:
    path, python_args = argv[0], argv[1:]
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as error:
        print(f"dsakit fork client: cannot reach the fork server at {path}: {error}", file=sys.stderr)
        return 1
    payload = json.dumps({"argv": python_args, "cwd": os.getcwd(), "env": dict(os.environ)}).encode()
    socket.send_fds(sock, [b"FORK"], [0, 1, 2])
    sock.sendall(struct.pack("!I", len(payload)) + payload)
    # the worker owns the controller's pipes now: our copies must go, so the controller sees EOF
    # when the worker dies (stderr stays: it is the controller's own, not a pipe execnet reads)
    devnull = os.open(os.devnull, os.O_RDWR)
    os.dup2(devnull, 0)
    os.dup2(devnull, 1)
    os.close(devnull)
    reader = sock.makefile("rb")
    pid = 0

    def forward(signum: int, _frame: object) -> None:
        if pid:
            try:
                os.kill(pid, signum)
            except OSError:
                pass

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, forward)
    for line in reader:
        message = json.loads(line)
        if "pid" in message:
            pid = int(message["pid"])
        elif "exit" in message:
            code = int(message["exit"])
            if code < 0:  # the worker died of a signal: so do we
                signal.signal(-code, signal.SIG_DFL)
                os.kill(os.getpid(), -code)
            return code
        elif "error" in message:
            print(f"dsakit fork client: the fork server refused: {message['error']}", file=sys.stderr)
            return 1
    print("dsakit fork client: the fork server went away before the worker exited", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
