"""What a mock provides, as a tree of attribute names: the value side of the audit.

Owns `AttrTree` (children by name; *open* when anything below may exist, e.g. a MagicMock without
spec or a value the audit cannot see into; *leaf* when nothing below exists, e.g. a constant) and
the lookup of the shortest path prefix a mock lacks. Data only: no AST, no SGLang.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class AttrTree:
    """The attributes one mock value provides.

    children  name -> the value's tree, with `sites[name]` saying where the mock sets it
    open      why anything below may exist ("" when the audit sees every attribute)
    leaf      a constant (None, a number, a list...): it has none of the attributes backends read
    value     the constant itself when it is a literal str / int / bool (the mock's `device = "xpu"`)
    """

    children: dict[str, AttrTree] = field(default_factory=dict)
    sites: dict[str, str] = field(default_factory=dict)
    open: str = ""
    leaf: bool = False
    value: str | int | float | bool | None = None

    @classmethod
    def opaque(cls, why: str) -> AttrTree:
        return cls(open=why)

    @classmethod
    def constant(cls, value: object = None) -> AttrTree:
        literal = value if isinstance(value, (str, int, float, bool)) else None
        return cls(leaf=True, value=literal)

    def set(self, name: str, value: AttrTree, site: str) -> None:
        self.children[name] = value
        self.sites[name] = site
        self.leaf = False

    def child_for_update(self, name: str) -> AttrTree | None:
        """The child to add attributes to (`x.a.b = v`), or None when it cannot take them."""
        child = self.children.get(name)
        return child if child is not None and not child.open else None

    def merge(self, other: AttrTree) -> None:
        """Add what `other` provides (a base class's attributes below a subclass's own)."""
        for name, child in other.children.items():
            if name not in self.children:
                self.children[name] = child
                self.sites[name] = other.sites.get(name, "")
        if other.open and not self.open:
            self.open = other.open

    def missing(self, path: str) -> str | None:
        """The shortest prefix of `path` this value lacks, or None (provided, or maybe provided)."""
        node = self
        parts = path.split(".")
        for depth, part in enumerate(parts):
            if node.open:
                return None
            child = node.children.get(part)
            if child is None:
                return ".".join(parts[: depth + 1])
            node = child
        return None

    def site_of(self, path: str) -> str:
        """Where the mock sets the last provided part of `path` ("" when unknown)."""
        node, site = self, ""
        for part in path.split("."):
            if part not in node.children:
                break
            site = node.sites.get(part, site)
            node = node.children[part]
        return site

    def names(self, prefix: str = "") -> list[str]:
        """Every provided dotted path (for JSON), open subtrees marked with a trailing '.*'."""
        found: list[str] = []
        for name, child in sorted(self.children.items()):
            path = f"{prefix}{name}"
            found.append(path + (".*" if child.open else ""))
            found.extend(child.names(path + "."))
        return found
