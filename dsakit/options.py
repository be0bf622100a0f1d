"""dsakit's run options: each `--dsakit-*` flag with its ini key (`dsakit_*` in pytest.ini /
`[tool.pytest.ini_options]`) and, where one exists, its environment variable.

Owns the table and the one precedence rule, `value(config, name)`: command line > environment
variable > ini key > default. The plugin registers the table; every reader asks `value`. Never
imports torch or SGLang (the plugin loads it).
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from dsakit import retired_settings
from dsakit.devices import keys_text


class RunOption:
    """One option: `--dsakit-x` on the command line, `dsakit_x` as an ini key. A plain class, not a
    dataclass: every pytest session loads this table, and a dataclass compiles its methods at load
    (bench/README.md, "Kit overhead")."""

    __slots__ = ("flag", "help", "default", "kind", "choices", "env", "metavar", "renamed_from")

    def __init__(self, flag: str, help: str, default: Any = None, kind: str = "str",
                 choices: tuple[str, ...] = (), env: str | None = None, metavar: str | None = None,
                 renamed_from: str | None = None) -> None:
        self.flag = flag
        self.help = help
        self.default = default
        self.kind = kind  # str, bool, int, path
        self.choices = choices
        self.env = env
        self.metavar = metavar
        self.renamed_from = renamed_from  # the flag's old spelling: still read (flag and ini key), with a warning

    def __repr__(self) -> str:
        return f"RunOption({self.flag!r})"

    @property
    def dest(self) -> str:
        return _dest(self.flag)

    @property
    def ini(self) -> str:
        return self.dest

    @property
    def text(self) -> str:
        """The help as shown: `{devices}` becomes the device table's keys, read when registered."""
        return self.help.replace("{devices}", keys_text())

    @property
    def old_ini(self) -> str | None:
        return _dest(self.renamed_from) if self.renamed_from else None


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


OPTIONS: tuple[RunOption, ...] = (
    RunOption("--dsakit-roles", "roles the `model_runner` fixture is parametrized over (comma-separated: "
              "target, draft)", default="target,draft", metavar="ROLES"),
    # -- capability gates and the skip inventory (dsakit.gates.marks, dsakit.gates.inventory)
    RunOption("--dsakit-device", "run the whole test process as a simulated device ({devices}; or "
              "'real', the default): gates, SGLang's probes, import-time "
              "checks, tensor placement; kernel launches skip. A comma-separated list runs one process "
              "per device and prints the fleet table. Module gates still look at this machine",
              env="DSAKIT_DEVICE", metavar="NAME"),
    RunOption("--dsakit-simulation-timeout", "under a simulated device (--dsakit-device), a test that runs "
              "longer than SECONDS is stopped and fails naming the call in flight (a kernel that hangs on "
              "this GPU, a JIT build that never ends); 0: never", default=600, kind="int", metavar="SECONDS"),
    RunOption("--dsakit-device-from-torch", "let torch.cuda name this machine's device when NVML, nvidia-smi "
              "and rocminfo find nothing", default=False, kind="bool", renamed_from="--dsakit-probe-torch"),
    RunOption("--dsakit-report", "write the run's report as JSON: the node (device, SGLang release, host "
              "label, pytest-split shard), every test's outcome and gates, skips per gate (`dsakit report "
              "merge` merges nodes and shards; an ini path is relative to the ini file)", kind="path",
              metavar="PATH"),
    RunOption("--dsakit-host-label", "this node's name in --dsakit-report (default: the hostname)",
              env="DSAKIT_HOST_LABEL", metavar="LABEL"),
    RunOption("--dsakit-must-run", "fail the run when any test behind these gate codes was skipped (per "
              "shard: tests of other shards are not skipped; `dsakit report merge` checks they ran on "
              "some node)", default="", metavar="CODE,..."),
    RunOption("--dsakit-must-run-strict", "also fail the run when no collected test sits behind a "
              "--dsakit-must-run gate (default: say so in the skip inventory and pass)", default=False,
              kind="bool"),
    # -- GPU nodes: one GPU per xdist worker (dsakit.node.gpu_pinning)
    RunOption("--dsakit-workers-per-gpu", "pin xdist workers to GPUs, N workers per GPU (off unless given: "
              "a run that does not ask keeps xdist's own worker count and environment; 0 is off). Each "
              "worker gets its own CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES entry; -n auto becomes "
              "GPUs x N", default=0, kind="int", metavar="N"),
    RunOption("--dsakit-split-threads", "give each xdist worker OMP_NUM_THREADS = CPUs / workers (off unless "
              "given; an OMP_NUM_THREADS you set wins)", default=False, kind="bool"),
    # -- kernel-launch contracts (dsakit.topk.launch_guard)
    RunOption("--dsakit-kernel-contracts", "check the arguments of every launch of SGLang's top-k and DSA "
              "metadata kernel entry points before the kernel runs (lengths, row starts, page tables, the v2 "
              "plan, dtypes and shapes; CUDA graphs: before each replay), in any suite; a violation fails "
              "the test naming the kernel, argument, row and call site", default=False, kind="bool"),
    # -- target/draft top-k backend matrix (dsakit.topk.matrix)
    RunOption("--dsakit-topk-subset", "top-k backend matrix subset for every `topk_cell` test of this run "
              "(overrides the dsakit_topk_matrix marker; default: the marker's, else pairwise)",
              choices=("full", "per-role", "pairwise")),
)
_BY_DEST = {option.dest: option for option in OPTIONS}
PRECEDENCE = "command line > environment variable > ini key > default"


def register(parser: pytest.Parser) -> None:
    """Every option as a flag (default None: "not given", so `value` can fall through) and an ini key."""
    group = parser.getgroup("dsakit", "dsakit: SGLang DSA / DeepSeek-V4 contract testing")
    for option in OPTIONS:
        env = f"; env {option.env}" if option.env else ""
        shown = f"{option.text} (ini: {option.ini}{env}; default {option.default!r})"
        if option.renamed_from:
            shown += f"; {option.renamed_from} is its old name"
        flags = (option.flag, option.renamed_from) if option.renamed_from else (option.flag,)
        if option.kind == "bool":
            group.addoption(*flags, dest=option.dest, action="store_true", default=None, help=shown)
        else:
            group.addoption(*flags, dest=option.dest, default=None, metavar=option.metavar,
                            choices=option.choices or None, help=shown,
                            type=int if option.kind == "int" else None)
        # type "string" everywhere (converted in `value`): "int"/"bool" ini types differ across pytest 8.x
        parser.addini(option.ini, f"{option.text} ({PRECEDENCE})", type="string", default=None)
        if option.old_ini:
            parser.addini(option.old_ini, f"old name of {option.ini}", type="string", default=None)
    retired_settings.register(parser)


def value(config: pytest.Config, dest: str) -> Any:
    """The option's value by the precedence rule; a bad env or ini value is a pytest usage error
    naming where it came from."""
    option = _BY_DEST[dest]
    given = config.getoption(dest, None)
    if given is not None:
        return given
    if option.env and os.environ.get(option.env):
        return os.environ[option.env]
    key, raw = _ini_value(config, option)
    if raw is None:
        return option.default
    return _convert(option, key, raw, config)


def _ini_value(config: pytest.Config, option: RunOption) -> tuple[str, str | None]:
    """The ini key that is set (the option's own before its old name) and its stripped value."""
    for key in (option.ini, option.old_ini):
        raw = config.getini(key) if key else None
        if key and raw is not None and raw != "" and raw != []:
            return key, str(raw).strip()
    return option.ini, None


def _convert(option: RunOption, key: str, raw: str, config: pytest.Config) -> Any:
    where = f"ini key {key} = {raw!r} ({config.inipath})"
    if option.kind == "bool":
        lowered = raw.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        raise pytest.UsageError(f"{where}: expected true or false")
    if option.kind == "int":
        try:
            return int(raw)
        except ValueError:
            raise pytest.UsageError(f"{where}: expected an integer") from None
    if option.choices and raw not in option.choices:
        raise pytest.UsageError(f"{where}: expected one of {', '.join(option.choices)}")
    if option.kind == "path" and config.inipath is not None:
        return str(config.inipath.parent / os.path.expanduser(raw))  # "~/r.json" is under $HOME
    return raw


def explicit(config: pytest.Config) -> tuple[str, ...]:
    """The dsakit options this run sets itself (command line, environment or ini key), by dest:
    empty means the run asked dsakit for nothing, so dsakit stays silent (dsakit.usage)."""
    given = []
    for option in OPTIONS:
        if config.getoption(option.dest, None) is not None or (option.env and os.environ.get(option.env)):
            given.append(option.dest)
            continue
        if _ini_value(config, option)[1] is not None:
            given.append(option.dest)
    return tuple(given)


def check_all(config: pytest.Config) -> None:
    """pytest_configure: a bad env or ini value is a usage error before collection, even for an
    option this run would never read."""
    for option in OPTIONS:
        value(config, option.dest)
    _warn_old_names(config)
    retired_settings.check(config)


def _warn_old_names(config: pytest.Config) -> None:
    """A renamed option still works under its old flag or ini key; the controller says the new name."""
    if hasattr(config, "workerinput"):
        return
    args = [str(arg).split("=", 1)[0] for arg in config.invocation_params.args]
    for option in OPTIONS:
        if not option.renamed_from or not option.old_ini:
            continue
        used = [f"flag {option.renamed_from}"] if option.renamed_from in args else []
        if config.getini(option.old_ini) not in (None, "", []):
            used.append(f"ini key {option.old_ini}")
        for where in used:
            config.issue_config_time_warning(pytest.PytestDeprecationWarning(
                f"{where} is the old name of {option.flag} (ini {option.ini}): use the new name"), stacklevel=2)
