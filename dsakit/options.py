"""dsakit's settings: each `--dsakit-*` flag with its ini key (`dsakit_*` in pytest.ini /
`[tool.pytest.ini_options]`) and, where one exists, its environment variable; the flags of the
outcome recorder (`dsakit compare` / `pr-check` child runs); the variables read alone; the ini keys
dsakit no longer has.

Owns the table and the one precedence rule, `value(config, name)`: command line > environment
variable > ini key > default (`environment(name)` outside a pytest run); a run's values, each read
once (`RunOptions`, held by the run's `dsakit.session.DsakitSession`); and the retired keys' rule:
one still set is refused with its sentence under strict config (`--strict-config`, ini
`strict_config` / `strict`) and is a PytestConfigWarning otherwise, never pytest's bare "Unknown
config option". Never imports torch or SGLang (the plugin loads it).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from dsakit.errors import UsageError

if TYPE_CHECKING:
    import pytest


class RunOption:
    """One setting: `--dsakit-x` on the command line and `dsakit_x` as an ini key, or (`flag` None) an
    environment variable alone. A plain class, not a dataclass: every pytest session loads this
    table, and a dataclass compiles its methods at load (bench/README.md, "Kit overhead")."""

    __slots__ = ("flag", "help", "default", "kind", "choices", "env", "metavar", "renamed_from", "has_ini",
                 "_dest")

    def __init__(self, flag: str | None, help: str, default: Any = None, kind: str = "str",
                 choices: tuple[str, ...] = (), env: str | None = None, metavar: str | None = None,
                 renamed_from: str | None = None, has_ini: bool = True) -> None:
        self.flag = flag
        self.help = help
        self.default = default
        self.kind = kind  # str, bool, int, path
        self.choices = choices
        self.env = env
        self.metavar = metavar
        self.renamed_from = renamed_from  # the flag's old spelling: still read (flag and ini key), with a warning
        self.has_ini = has_ini and flag is not None
        self._dest = _dest(flag) if flag else str(env).lower()

    def __repr__(self) -> str:
        return f"RunOption({self.flag or self.env!r})"

    @property
    def dest(self) -> str:
        return self._dest

    @property
    def ini(self) -> str:
        return self.dest

    @property
    def text(self) -> str:
        """The help as shown: `{devices}` becomes the device table's keys, read when registered."""
        if "{devices}" not in self.help:
            return self.help
        from dsakit.devices import keys_text

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
              "and rocminfo find nothing", default=False, kind="bool", env="DSAKIT_DEVICE_FROM_TORCH",
              renamed_from="--dsakit-probe-torch"),
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
# what dsakit's own commands pass to their child runs (`dsakit compare`, `pr-check`): registered by
# the recorder plugin they load (`-p dsakit.compare.recorder`), flags only
RECORDER_OPTIONS: tuple[RunOption, ...] = (
    RunOption("--dsakit-record", "(dsakit compare) append one JSON line per test outcome, and the environment, "
              "to PATH", metavar="PATH", has_ini=False),
    RunOption("--dsakit-record-only", "(dsakit pr-check) run only the test ids listed in PATH, one per line (the "
              "rerun of failures)", metavar="PATH", has_ini=False),
)
# variables read alone (no flag, no ini key): they describe the machine, not the run
ENVIRONMENT: tuple[RunOption, ...] = (
    RunOption(None, "the GPU count GPU pinning sees (a simulated node, or a device tool that counts wrong)",
              env="DSAKIT_GPU_COUNT"),
    RunOption(None, "where dsakit keeps its warm locks and stamps (default: dsakit's folder in "
              "$XDG_CACHE_HOME, ~/.cache)", env="DSAKIT_CACHE_DIR"),
)
_BY_DEST = {option.dest: option for option in (*OPTIONS, *RECORDER_OPTIONS, *ENVIRONMENT)}
PRECEDENCE = "command line > environment variable > ini key > default"


def register(parser: pytest.Parser, rows: tuple[RunOption, ...] = OPTIONS) -> None:
    """Every row as a flag (default None: "not given", so `value` can fall through) and, where it has
    one, an ini key; the plugin's rows also register the retired ini keys."""
    group = parser.getgroup("dsakit", "dsakit: SGLang DSA / DeepSeek-V4 contract testing")
    for option in rows:
        assert option.flag is not None, option
        env = f"; env {option.env}" if option.env else ""
        where = f"ini: {option.ini}{env}; " if option.has_ini else (f"env {option.env}; " if env else "")
        shown = f"{option.text} ({where}default {option.default!r})"
        if option.renamed_from:
            shown += f"; {option.renamed_from} is its old name"
        flags = (option.flag, option.renamed_from) if option.renamed_from else (option.flag,)
        if option.kind == "bool":
            group.addoption(*flags, dest=option.dest, action="store_true", default=None, help=shown)
        else:
            group.addoption(*flags, dest=option.dest, default=None, metavar=option.metavar,
                            choices=option.choices or None, help=shown,
                            type=int if option.kind == "int" else None)
        if not option.has_ini:
            continue
        # type "string" everywhere (converted in `value`): "int"/"bool" ini types differ across pytest 8.x
        parser.addini(option.ini, f"{option.text} ({PRECEDENCE})", type="string", default=None)
        if option.old_ini:
            parser.addini(option.old_ini, f"old name of {option.ini}", type="string", default=None)
    if rows is OPTIONS:
        for key in RETIRED_INI:  # known to pytest, so `check_all` words the message instead of pytest's
            parser.addini(key, "retired: dsakit no longer reads it (set, it is refused or warned about)",
                          type="string", default=None)


def value(config: pytest.Config, dest: str) -> Any:
    """The option's value by the precedence rule; a bad env or ini value is a pytest usage error
    naming where it came from."""
    option = _BY_DEST[dest]
    given = config.getoption(dest, None) if option.flag else None
    if given is not None:
        return given
    if option.env and os.environ.get(option.env):
        return _from_env(option, os.environ[option.env], config)
    key, raw = _ini_value(config, option)
    if raw is None:
        return option.default
    return _convert(option, f"ini key {key} = {raw!r} ({config.inipath})", raw, config, from_ini=True)


def environment(dest: str, environ: Mapping[str, str] | None = None) -> Any:
    """Outside a pytest run (a command, the device reader): the row's environment variable, converted,
    else its default; a bad value is a UsageError naming the variable."""
    option = _BY_DEST[dest]
    raw = (os.environ if environ is None else environ).get(option.env or "", "")
    return _from_env(option, raw, None) if raw else option.default


def _from_env(option: RunOption, raw: str, config: pytest.Config | None) -> Any:
    if option.kind == "str" and not option.choices:
        return raw
    return _convert(option, f"environment variable {option.env} = {raw!r}", raw.strip(), config)


def _ini_value(config: pytest.Config, option: RunOption) -> tuple[str, str | None]:
    """The ini key that is set (the option's own before its old name) and its stripped value."""
    if not option.has_ini:
        return option.ini, None
    for key in (option.ini, option.old_ini):
        raw = config.getini(key) if key else None
        if key and raw is not None and raw != "" and raw != []:
            return key, str(raw).strip()
    return option.ini, None


def _convert(option: RunOption, where: str, raw: str, config: pytest.Config | None, *, from_ini: bool = False) -> Any:
    if option.kind == "bool":
        lowered = raw.lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        _refuse(config, f"{where}: expected true or false")
    if option.kind == "int":
        try:
            return int(raw)
        except ValueError:
            _refuse(config, f"{where}: expected an integer")
    if option.choices and raw not in option.choices:
        _refuse(config, f"{where}: expected one of {', '.join(option.choices)}")
    if option.kind == "path" and from_ini and config is not None and config.inipath is not None:
        return str(config.inipath.parent / os.path.expanduser(raw))  # "~/r.json" is under $HOME
    return raw


def _refuse(config: pytest.Config | None, message: str) -> NoReturn:
    """Inside pytest a usage error (exit 4), outside it dsakit's own (the command's exit 2)."""
    if config is None:
        raise UsageError(message)
    import pytest

    raise pytest.UsageError(message)


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


class RunOptions:
    """One run's option values, each read once by the precedence rule (its DsakitSession holds them):
    `options["dsakit_device"]`. `given` is what the run sets itself (`explicit`)."""

    __slots__ = ("config", "_values", "_given")

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._values: dict[str, Any] = {}
        self._given: tuple[str, ...] | None = None

    def __getitem__(self, dest: str) -> Any:
        try:
            return self._values[dest]
        except KeyError:
            found = self._values[dest] = value(self.config, dest)
            return found

    @property
    def given(self) -> tuple[str, ...]:
        if self._given is None:
            self._given = explicit(self.config)
        return self._given

    def check_all(self) -> None:
        """pytest_configure: a bad env or ini value is a usage error before collection, even for an
        option this run would never read; old names and retired keys are said."""
        for option in OPTIONS:
            self[option.dest]
        _warn_old_names(self.config)
        _check_retired(self.config)


def _warn_old_names(config: pytest.Config) -> None:
    """A renamed option still works under its old flag or ini key; the controller says the new name."""
    if hasattr(config, "workerinput"):
        return
    import pytest

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


# ---------------------------------------------------------------- settings dsakit no longer has

_FORK_SERVER = (
    "the fork server was removed (it failed on every CUDA node with `CUDA error: initialization error` "
    "and fell back to a plain spawn; the plain xdist spawn met the scaling goals: "
    "bench/notes/2026-11-30-xdist-spawn-fork-server.md, \"Why the fork server was removed\"). xdist "
    "workers always spawn plainly; `dsakit warm` makes their first test fast. Delete the line"
)

RETIRED_INI: dict[str, str] = {
    "dsakit_fork_server": _FORK_SERVER,
    "dsakit_fork_server_keep_s": _FORK_SERVER,
    "dsakit_fork_server_preload": _FORK_SERVER,
}


def _check_retired(config: pytest.Config) -> None:
    """Controller only: refuse or warn about every retired key the ini sets (a retired key is never read)."""
    if hasattr(config, "workerinput"):
        return  # the controller already said it
    import pytest

    for key, sentence in RETIRED_INI.items():
        raw = config.getini(key)
        if raw is None:
            continue
        message = f"ini key {key} = {str(raw).strip()!r} ({config.inipath or 'an -o override'}): {sentence}"
        if _strict_config(config):
            raise pytest.UsageError(message)
        config.issue_config_time_warning(pytest.PytestConfigWarning(message), stacklevel=2)


def _strict_config(config: pytest.Config) -> bool:
    """pytest 9: ini `strict_config`, else `strict` (--strict-config sets the first); pytest 8: the flag."""
    for name in ("strict_config", "strict"):
        try:
            found = config.getini(name)
        except ValueError:  # not an ini key in this pytest
            continue
        if found is not None and found != "":
            return bool(found)
    return bool(getattr(config.option, "strict_config", False))
