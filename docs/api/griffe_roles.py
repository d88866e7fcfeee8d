"""Griffe extension for the docs build: Sphinx cross-reference roles become links.

rknnlite's docstrings refer to other objects with Sphinx roles (``:meth:`run```,
``:class:`~rknnlite.constants.CoreMask```, ``:mod:`.formula```).  Markdown has no such
syntax, so mkdocstrings would print the role names literally.  Once griffe has loaded the
package, this extension rewrites every role in every docstring into an *optional*
mkdocs-autorefs reference (``<autoref identifier="..." optional>``): a link where the
target is rendered on some page of the site, plain code text where it is not (private
helpers, modules without a page), and never a warning either way.

Names are resolved as Sphinx resolves them: a dotted path relative to the object that
holds the docstring, then to its parents and their imports, then from the package root; a
leading ``.`` is relative to the current module's package; ``~`` shows only the last
component.  Targets are written as canonical paths (where the object is defined), which
mkdocstrings-python registers for every object it renders, whatever path it was rendered
under.

Loaded by ``mkdocs.yml`` (``plugins: mkdocstrings: handlers: python: options: extensions``);
not part of the rknnlite package.
"""

from __future__ import annotations

import html
import re
from typing import Any, Optional

import griffe

ROLE = re.compile(r":(?:py:)?(?:class|meth|func|attr|mod|data|exc|obj|const):`(?P<target>[^`]+)`")


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in the docstrings of a loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Called once the package and all its submodules are loaded."""
        _rewrite_tree(pkg, pkg)


def _rewrite_tree(obj: griffe.Object, pkg: griffe.Module) -> None:
    docstring = obj.docstring
    if docstring is not None and ":`" in docstring.value:
        docstring.value = ROLE.sub(lambda m: _reference(m.group("target"), obj, pkg), docstring.value)
    for member in list(obj.members.values()):
        if member.is_alias:
            continue  # documented where it is defined
        _rewrite_tree(member, pkg)


def _reference(target: str, obj: griffe.Object, pkg: griffe.Module) -> str:
    """The autorefs element (or the code text) for one role's target."""
    titled = re.fullmatch(r"(?s)(.*?)\s*<([^<>]+)>", target)  # :role:`title <target>`
    if titled:
        text, name = titled.group(1), titled.group(2).lstrip("~")
    else:
        name = target.lstrip("~")
        text = name.rsplit(".", 1)[-1] if target.startswith("~") else name.lstrip(".")
    code = f"<code>{html.escape(text)}</code>"
    path = _resolve(name, obj, pkg)
    if path is None:
        return code
    return f'<autoref identifier="{html.escape(path)}" optional>{code}</autoref>'


def _resolve(name: str, obj: griffe.Object, pkg: griffe.Module) -> Optional[str]:
    """The canonical path of ``name`` seen from ``obj``, or None when nothing matches."""
    if name.startswith("."):
        module = obj.module
        base = module if module.is_init_module else module.parent
        dots = len(name) - len(name.lstrip("."))
        for _ in range(dots - 1):
            base = base.parent if base is not None else None
        return _canonical(f"{base.path}.{name.lstrip('.')}", pkg) if base is not None else None
    head, _, rest = name.partition(".")
    scope: Optional[griffe.Object] = obj
    while scope is not None:
        if head in scope.members or head in getattr(scope, "imports", {}):
            try:
                base = scope.resolve(head)
            except (griffe.NameResolutionError, KeyError, AttributeError):
                base = None
            if base is not None:
                found = _canonical(f"{base}.{rest}" if rest else base, pkg)
                if found is not None:
                    return found
        scope = scope.parent
    return _canonical(name, pkg)


def _canonical(path: str, pkg: griffe.Module) -> Optional[str]:
    """Follow ``path`` from the package root (through aliases) to where it is defined."""
    parts = path.split(".")
    if parts[0] != pkg.name:
        return None
    current: Any = pkg
    for part in parts[1:]:
        try:
            if current.is_alias:
                current = current.final_target
            current = current.members[part]
        except (KeyError, AttributeError, griffe.AliasResolutionError, griffe.CyclicAliasError):
            return None
    try:
        return current.canonical_path
    except (griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
