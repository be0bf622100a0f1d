"""SGLang's own skip messages, classified: which dsakit capability code each one means.

Owns the declared tables (one per SGLang release range) that turn the skip messages of SGLang's
attention unit-test kit (`sglang/test/kits/attention_unittest`, `dsa_impl_capability` and its
callers) and of its DSA / DeepSeek-V4 suites into a gate code of `dsakit.gates.table`, a clause in
plain words and the devices of the device table where the case runs. Must not import pytest,
torch or SGLang; a message no row matches stays uncoded (the caller lists it verbatim).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from dsakit.stack.sglang_release import release_numbers

# where a row's case runs when no device opens it: SGLang's suite declares a combination that no
# device runs (an FP8 KV cache on an impl that reads BF16 K, TileLang on the topk=128 fixture)
NOWHERE = "no device: SGLang's suite never runs this combination"


@dataclass(frozen=True)
class MessagePattern:
    """One kind of SGLang skip message.

    code     the dsakit gate code it means (validated against the gate table by the tests)
    pattern  a regular expression searched in the message; named groups fill `words`
    words    the clause for the "why these skipped" paragraph ("FA3 is SM 9.x only")
    where    gate codes or capability expressions: the case runs on the devices that open any of
             them; empty: `note` says where
    note     where it runs when no device opens it (NOWHERE, or "where X is installed")
    source   a piece of the message's text as SGLang's source writes it (the tests find it in the
             kit of every release of the range, or in the suite named after "suite:")
    """

    code: str
    pattern: str
    words: str
    where: tuple[str, ...]
    note: str = ""
    source: str = ""


@dataclass(frozen=True)
class ReleaseTable:
    """The patterns of SGLang releases `first` to `last` (None: every later release too)."""

    first: str
    last: str | None
    patterns: tuple[MessagePattern, ...]

    def holds(self, release: tuple[int, ...]) -> bool:
        return (release_numbers(self.first) <= release
                and (self.last is None or release <= release_numbers(self.last)))


# Read from each release's kit (sglang/test/kits/attention_unittest/attention_methods/dsa_attention.py)
# and SGLang's suites (test/registered/attention/unittests/{dsa/test_dsa.py,dsv4/test_deepseek_v4.py});
# a release reads every table whose range holds it, first table first.
TABLES: tuple[ReleaseTable, ...] = (
    ReleaseTable("0.5.17", None, (
        MessagePattern("fa3", r"fa3 requires SM9\.x \(Hopper\), got SM(?P<got>\d+)\.x",
                       "FA3 is SM 9.x only", ("fa3",), source="fa3 requires SM9.x (Hopper), got SM"),
        MessagePattern("fa3", r"sglang\.kernels\.ops\.attention\.flash_attention unavailable: ",
                       "FA3's flash_attention does not import here", ("fa3",),
                       source="sglang.kernels.ops.attention.flash_attention unavailable: "),
        MessagePattern("trtllm-dsa-decode",
                       r"trtllm requires SM10\.0 \(Blackwell B200\), got SM(?P<got>\d+\.\d+)",
                       "TensorRT-LLM DSA decode covers SM 10.0, not {got}", ("sm==10.0",),
                       source="trtllm requires SM10.0 (Blackwell B200), got SM"),
        MessagePattern("module:flashinfer", r"flashinfer unavailable: ", "flashinfer does not import here", (),
                       "where flashinfer is installed", source="flashinfer unavailable: "),
        MessagePattern("aiter", r"aiter is HIP/AMD only", "AITER is AMD-only", ("aiter",),
                       source="aiter is HIP/AMD only"),
        MessagePattern("module:aiter", r"aiter unavailable: ", "aiter does not import here", (),
                       "where aiter is installed (AMD gfx942 / gfx950)", source="aiter unavailable: "),
        MessagePattern("module:tilelang", r"tilelang JIT on SM(?P<got>\d+\.\d+) needs `wait_wgmma` template",
                       "the image's TileLang has no SM {got} template (wait_wgmma)", ("sm~9",),
                       source="needs `wait_wgmma` template "),
        MessagePattern("module:tilelang", r"tilelang_kernel unavailable: ", "TileLang's DSA kernel does not import here",
                       (), "where tilelang is installed", source="tilelang_kernel unavailable: "),
        MessagePattern("module:tilelang",
                       r"DSA tilelang (?:prefill|decode) requires topk=2048; the shared sparse fixture uses "
                       r"topk=(?P<topk>\d+)",
                       "TileLang needs topk=2048, the shared fixture has {topk}", (), NOWHERE,
                       source="requires topk=2048; the shared sparse fixture "),
        MessagePattern("fp8-kv", r"DSA decode impl `(?P<impl>[^`]+)` does not support FP8 KV cache",
                       "FP8 KV decode needs flashmla_kv", (), NOWHERE,
                       source="cache (only `flashmla_kv` / `flashmla_auto` read FP8 K directly)."),
        MessagePattern("sm>=9.0", r"(?P<impl>\w+) requires SM>=9\.0, got SM(?P<got>\d+)\.x",
                       "{impl} needs SM 9.0 or later", ("sm>=9.0",), source=" requires SM>=9.0, got SM"),
        MessagePattern("cuda", r"^CUDA is required$", "the suite needs a GPU (torch.cuda)", ("cuda", "rocm"),
                       source="suite: CUDA is required"),
        MessagePattern("module:sgl_kernel.flashmla_ops", r"^flash_mla is required for DSV4 SWA$",
                       "sgl_kernel's FlashMLA (DeepSeek-V4 SWA) is not installed here", (),
                       "where sgl_kernel ships flash_mla", source="suite: flash_mla is required for DSV4 SWA"),
    )),
    ReleaseTable("0.5.17", "0.5.22", (
        MessagePattern("module:sgl_kernel.flashmla_ops", r"sgl_kernel\.flash_mla unavailable: ",
                       "sgl_kernel's FlashMLA does not import here", (), "where sgl_kernel ships flash_mla",
                       source="sgl_kernel.flash_mla unavailable: "),
        MessagePattern("fp8-kv", r"DSA prefill impl `(?P<impl>[^`]+)` does not support FP8 KV cache",
                       "FP8 KV prefill needs flashmla_sparse, flashmla_kv or flashmla_auto", (), NOWHERE,
                       source="cache (only `flashmla_sparse`, `flashmla_kv`, and `flashmla_auto` "),
    )),
    ReleaseTable("0.5.22", None, (
        MessagePattern("cuda", r"triton_sparse_mla is a CUDA-only prefill backend", "triton_sparse_mla is CUDA-only",
                       ("cuda",), source="triton_sparse_mla is a CUDA-only prefill backend"),
    )),
    ReleaseTable("0.5.23", None, (
        MessagePattern("fp8-kv", r"DSA prefill impl `(?P<impl>[^`]+)` does not support FP8 KV cache",
                       "FP8 KV prefill needs aiter, flashmla_sparse, flashmla_kv or flashmla_auto", (), NOWHERE,
                       source="cache (only `aiter`, `flashmla_sparse`, `flashmla_kv`, and "),
        MessagePattern("flashmla-sparse", r"flashmla_sparse_q8 prefill is SM90-only",
                       "flashmla_sparse_q8 prefill is SM 9.0 only", ("sm==9.0",),
                       source="flashmla_sparse_q8 prefill is SM90-only"),
    )),
)


@dataclass(frozen=True)
class Classified:
    """A message matched by a row: the row and the words with its groups filled in."""

    pattern: MessagePattern
    words: str


@functools.lru_cache(maxsize=64)
def patterns_for(release: str | None) -> tuple[tuple[MessagePattern, re.Pattern[str]], ...]:
    """The compiled rows a release reads (none for a release older than every table, or unknown)."""
    numbers = release_numbers(release or "")
    if not numbers:
        return ()
    return tuple((row, re.compile(row.pattern)) for table in TABLES if table.holds(numbers)
                 for row in table.patterns)


@functools.lru_cache(maxsize=1024)
def classify(message: str, release: str | None) -> Classified | None:
    """The row `message` (an SGLang skip message, verbatim) matches under SGLang `release`, else None."""
    for row, compiled in patterns_for(release):
        found = compiled.search(message)
        if found is not None:
            return Classified(row, row.words.format(**found.groupdict()))
    return None
