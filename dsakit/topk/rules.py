"""The expected-resolution oracle: dsakit's own rule table for DSA top-k configurations.

Owns: for one configuration and role, the backend the role MUST resolve to, the flag it reads, the
rule (role split, or the pre-split rule), the transform path, and why the configuration is
invalid or noteworthy, as `Reason`s. Written from SGLang's documented behaviour, never by calling
it: the contract suite checks the real code against this table. No torch, SGLang or pytest.
"""

from __future__ import annotations

from dataclasses import dataclass

from dsakit.reasons import Reason
from dsakit.topk.backends import TOPK_BACKENDS, topk_backend
from dsakit.topk.flags import DRAFT_FIELD, FUSE_FLAG, TARGET_FIELD, V2_FLAG, TopkFlags

ROLES = ("target", "draft")
ROLE_SPLIT = "role-split"
PRE_SPLIT = "pre-split rule"

# Stable reason codes (reports group by them).
TORCH_NEEDS_UNFUSED = "torch-needs-unfused"
NO_ROLE_SPLIT = "no-role-split"
FUSION_OFF_BOTH_ROLES = "fusion-off-for-both-roles"
V2_NOT_APPLICABLE = "v2-not-applicable"
V2_UNUSED_UNFUSED = "v2-unused-when-unfused"
PRE_SPLIT_NOTE = "pre-split-rule"


@dataclass(frozen=True)
class TopkConfig:
    """One server configuration: both backend flags and the two env flags (process-wide)."""

    target: str
    draft: str
    fused: bool
    v2: bool


@dataclass(frozen=True)
class Expectation:
    """What one role must see under one configuration on one release."""

    role: str
    backend: str  # the DSATopKBackend value resolution must return
    reads: str  # the ServerArgs field the role's backend comes from
    rule: str  # ROLE_SPLIT or PRE_SPLIT
    uses_v2: bool  # DSATopKBackend.should_use_topk_v2()
    transform: str  # the path DSATopKBackend.topk_transform takes (decode, PAGED)
    invalid: tuple[Reason, ...]
    notes: tuple[Reason, ...]

    @property
    def valid(self) -> bool:
        return not self.invalid

    @property
    def codes(self) -> tuple[str, ...]:
        return tuple(r.code for r in self.invalid)


def effective_backends(config: TopkConfig, flags: TopkFlags) -> dict[str, str]:
    """The backend each role runs: the split reads one flag per role; the pre-split rule
    (SGLang 0.5.17: `DSATopKBackend(server_args.dsa_topk_backend)` for every worker) reads
    `--dsa-topk-backend` for both."""
    if flags.has_split:
        return {"target": config.target, "draft": config.draft}
    return {"target": config.target, "draft": config.target}


def _config_text(config: TopkConfig) -> str:
    return (f"{TARGET_FIELD}={config.target}, {DRAFT_FIELD}={config.draft}, "
            f"{FUSE_FLAG}={'true' if config.fused else 'false'}, "
            f"{V2_FLAG}={'true' if config.v2 else 'false'}")


def invalid_reasons(config: TopkConfig, flags: TopkFlags) -> list[Reason]:
    """Why this configuration cannot be served (empty: valid). Role-independent: an invalid
    draft configuration makes the whole server invalid, so the target cell carries it too."""
    reasons: list[Reason] = []
    if not flags.has_split and config.draft != config.target:
        reasons.append(Reason(
            NO_ROLE_SPLIT,
            f"SGLang {flags.version} has no {DRAFT_FIELD}: draft workers read --dsa-topk-backend "
            f"(the pre-split rule), so draft={config.draft} with target={config.target} cannot be "
            f"configured; the cell with draft={config.target} covers this release, SGLang 0.5.23 "
            f"has the per-role split"))
    if config.fused:
        unfused = {role: backend for role, backend in effective_backends(config, flags).items()
                   if not topk_backend(backend).fused}
        if unfused:
            who, names = " and ".join(unfused), " / ".join(dict.fromkeys(unfused.values()))
            reasons.append(Reason(
                TORCH_NEEDS_UNFUSED,
                f"the {who} top-k backend is {names}, which requires {FUSE_FLAG}=false (server-args "
                f"help; DSATopKBackend.topk_transform raises 'Unsupported ... for "
                f"{FUSE_FLAG}' on the fused path), but the cell has {FUSE_FLAG}=true; the "
                f"unfused cell covers {names}"))
    return reasons


def _transform(backend: str, config: TopkConfig) -> str:
    record = topk_backend(backend)
    if not config.fused:
        return f"unfused:{backend}.topk_func"
    if not record.fused:
        return f"refused:{backend}-fused"
    if record.takes_v2 and config.v2:
        return "fused:v2-jit"
    return f"fused:{backend}"


def expect(role: str, config: TopkConfig, flags: TopkFlags) -> Expectation:
    """The oracle: what `role` must resolve to under `config` on the release `flags` describes."""
    from dsakit.contracts.schema import Role

    role = Role.parse(role).value
    backend = effective_backends(config, flags)[role]
    rule = ROLE_SPLIT if flags.has_split else PRE_SPLIT
    reads = DRAFT_FIELD if (role == "draft" and flags.has_split) else TARGET_FIELD
    invalid = tuple(invalid_reasons(config, flags))
    notes: list[Reason] = []
    if rule == PRE_SPLIT and role == "draft":
        notes.append(Reason(PRE_SPLIT_NOTE,
                            f"SGLang {flags.version}: the draft worker reads --dsa-topk-backend "
                            f"(pre-split rule), resolving to {backend}"))
    other = "draft" if role == "target" else "target"
    other_backend = effective_backends(config, flags)[other]
    if not config.fused and topk_backend(backend).fused and not topk_backend(other_backend).fused:
        notes.append(Reason(
            FUSION_OFF_BOTH_ROLES,
            f"{FUSE_FLAG}=false is process-wide: the {other}'s {other_backend} backend needs it, so this "
            f"{role}'s {backend} backend runs unfused too (checked nowhere upstream)"))
    uses_v2 = topk_backend(backend).takes_v2 and config.v2
    if config.v2 and not topk_backend(backend).takes_v2:
        takers = " / ".join(b.value for b in TOPK_BACKENDS.values() if b.takes_v2)
        notes.append(Reason(V2_NOT_APPLICABLE,
                            f"{V2_FLAG} only affects {takers} (should_use_topk_v2); the {role} "
                            f"runs {backend}"))
    if uses_v2 and not config.fused:
        notes.append(Reason(V2_UNUSED_UNFUSED,
                            f"{V2_FLAG}=true but {FUSE_FLAG}=false: topk_transform returns "
                            f"topk_func before the v2 dispatch (the v2 plan is still built)"))
    return Expectation(
        role=role,
        backend=backend,
        reads=reads,
        rule=rule,
        uses_v2=uses_v2,
        transform=_transform(backend, config),
        invalid=invalid,
        notes=tuple(notes),
    )


def describe(config: TopkConfig) -> str:
    return _config_text(config)


# Public alias (`dsakit.expect_topk`).
expect_topk = expect
