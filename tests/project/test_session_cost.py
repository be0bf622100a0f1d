"""What a run that uses dsakit pays once per session (bench/README.md, "Kit overhead"): no dataclass
is created while the modules such a run loads import, and the `sglang:topk-role-split` verdict
parses no SGLang file. The records that replace the dataclasses keep a frozen dataclass's behaviour."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys

import pytest

from dsakit.devices import DEVICES, DeviceEntry
from dsakit.gates.device_model import simulated_model
from dsakit.reasons import Reason
from dsakit.stack import sglang_release

# the modules a run with dsakit's fixtures and gate marks loads (bench/bench_kit_overhead.py's matrix)
USED = ("dsakit.plugin", "dsakit.session", "dsakit.devices", "dsakit.reasons", "dsakit.gates.device_model",
        "dsakit.gates.table", "dsakit.gates.marks", "dsakit.gates.inventory", "dsakit.stack.sglang_release",
        "dsakit.mocks.read_log", "dsakit.mocks.runner_scope", "dsakit.active")

_COUNT = """
import dataclasses, importlib, sys
made = []
original = dataclasses._process_class
def counting(cls, *args, **kwargs):
    made.append(cls.__module__ + "." + cls.__qualname__)
    return original(cls, *args, **kwargs)
dataclasses._process_class = counting
for name in sys.argv[1:]:
    importlib.import_module(name)
print([m for m in made if m.startswith("dsakit.")])
"""


def test_the_modules_a_run_loads_create_no_dataclass() -> None:
    done = subprocess.run([sys.executable, "-c", _COUNT, *USED], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]", done.stdout


@pytest.mark.parametrize("make", [lambda: Reason("code", "a sentence"), lambda: DEVICES["sm90"],
                                  lambda: simulated_model("sm103"), lambda: sglang_release.FEATURES["dsa-backend"]],
                         ids=["reason", "device-entry", "device-model", "feature"])
def test_a_record_behaves_as_a_frozen_dataclass(make: object) -> None:
    record = make()  # type: ignore[operator]
    twin = pickle.loads(pickle.dumps(record))
    assert twin == record and hash(twin) == hash(record) and twin is not record
    assert repr(record).startswith(f"{type(record).__qualname__}(") and repr(twin) == repr(record)
    assert record != object() and (record == object()) is False
    first = record.__match_args__[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(record, first, "changed")
    with pytest.raises(dataclasses.FrozenInstanceError):
        delattr(record, first)


def test_a_records_fields_decide_equality() -> None:
    entry = DeviceEntry("x1", "nvidia", "X", (9, 0), None, 1, "12.8", 2)
    assert entry == DeviceEntry("x1", "nvidia", "X", (9, 0), None, 1, "12.8", 2, (), False)
    assert entry != DeviceEntry("x1", "nvidia", "X", (9, 0), None, 1, "12.8", 2, pr_gate=True)
    assert Reason("a", "b") != Reason("a", "c") and len({Reason("a", "b"), Reason("a", "b")}) == 1


_PARSES = """
from dsakit.stack import sglang_source
from dsakit.stack.sglang_release import installed_release
release = installed_release()
before = sglang_source.stats()["parsed"]
assert release.has("topk-role-split") is True
print(sglang_source.stats()["parsed"] - before)
"""


def test_the_role_split_verdict_parses_no_file(installed_sglang: object) -> None:
    """The installed SGLang defines DSATopKBackend.resolve plainly: the text says so, no AST
    (parsing that file cost every run that evaluates the gate ~22 M instructions)."""
    done = subprocess.run([sys.executable, "-c", _PARSES], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "0", done.stdout


SOURCE = '''
import x


class Backend(Base):
    """A docstring naming def later( and
class Fake:
    def hidden(self):
    """

    def resolve(self, runner):
        def inner():
            pass
        return inner

    @staticmethod
    async def later(): ...


def top(): ...
class Other: pass
'''


@pytest.mark.parametrize("name", ["Backend.resolve", "Backend.later", "top", "Other", "Backend", "Backend.inner",
                                  "Fake.hidden", "Backend.hidden", "inner", "Other.resolve", "missing"])
def test_the_text_answer_never_claims_what_the_ast_denies(name: str, tmp_path: object) -> None:
    """`_defined_in_text` may miss (the AST then answers) but never finds a name the AST does not define."""
    import pathlib

    path = pathlib.Path(str(tmp_path)) / "module.py"
    path.write_text(SOURCE, encoding="utf-8")
    exact = name in sglang_release._defined_names(path)
    if sglang_release._defined_in_text(SOURCE, name):
        assert exact, name
    assert exact == (name in ("Backend.resolve", "Backend.later", "top", "Other", "Backend"))
